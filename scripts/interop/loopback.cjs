// Preload (`node --require loopback.cjs ...`): every TCP server the process
// starts listens on 127.0.0.1 only.
//
// server-everything 2026.8.31 (dist/transports/streamableHttp.js) calls
// `app.listen(PORT, cb)` and has no HOST setting, and the conformance suite's
// mock servers call `listen(0, cb)`: both would listen on all interfaces.
// Unix sockets and handles (`listen({path})`, `listen({fd})`, a pipe name) are
// left alone.
//
// With LOOPBACK_ANNOUNCE=1 it prints `listening on 127.0.0.1:PORT` on stderr
// once a server listens, so a caller can pass PORT=0 and read the port.
"use strict";

const dns = require("node:dns");
const net = require("node:net");

const LOOPBACK = "127.0.0.1";
const listen = net.Server.prototype.listen;
const lookup = dns.lookup;

// With a host, `listen` looks the address up (asynchronously) before it binds,
// so `server.address()` right after `listen()` would be null; the suite's mock
// servers read it at once. For our own literal address, inside `listen`, the
// answer is given at once, which keeps listen's synchronous binding.
let inListen = false;
dns.lookup = function lookupLoopback(hostname, options, callback) {
  if (inListen && hostname === LOOPBACK) {
    if (typeof options === "function") {
      options(null, LOOPBACK, 4);
      return {};
    }
    if (options && options.all === true && typeof callback === "function") {
      callback(null, [{ address: LOOPBACK, family: 4 }]);
      return {};
    }
  }
  return lookup.apply(this, arguments);
};

function isPort(value) {
  return typeof value === "number" || (typeof value === "string" && /^\d+$/.test(value));
}

net.Server.prototype.listen = function listenOnLoopback(...args) {
  const first = args[0];
  if (first !== null && typeof first === "object" && !Array.isArray(first)) {
    if (first.path === undefined && first.fd === undefined && first.handle === undefined && !first._handle) {
      args[0] = { ...first, host: LOOPBACK };
    }
  } else if (args.length === 0 || typeof first === "function") {
    args.unshift(0, LOOPBACK);
  } else if (isPort(first)) {
    args[0] = Number(first);
    if (typeof args[1] === "string") {
      args[1] = LOOPBACK;
    } else {
      args.splice(1, 0, LOOPBACK);
    }
  }
  if (process.env.LOOPBACK_ANNOUNCE === "1") {
    this.once("listening", () => {
      const address = this.address();
      if (address && typeof address === "object") {
        process.stderr.write(`listening on ${address.address}:${address.port}\n`);
      }
    });
  }
  inListen = true;
  try {
    return listen.apply(this, args);
  } finally {
    inListen = false;
  }
};
