// What the Node clients of scripts/interop.sh share: their arguments, and checks that each end in
// a bounded time and land as {name, ok, detail} rows, as report.py reads them.
"use strict";

const RESULTS = [];

/** The value after `name` on the command line. */
function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
}

function record(name, ok, detail) {
  RESULTS.push({ name, ok: !!ok, detail: String(detail ?? "") });
  console.log(`${ok ? "PASS" : "FAIL"}  ${name}${detail ? ` -- ${detail}` : ""}`);
}

/** `promise`, or an error naming `what` once `ms` have passed. */
function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Runs `body` (resolving to [ok, detail]) within `ms`, and records its row. */
async function check(ms, name, body) {
  try {
    const [ok, detail] = await within(ms, body(), name);
    record(name, ok, detail);
  } catch (e) {
    record(name, false, `${e?.name ?? "Error"}: ${e?.message ?? e}`);
  }
}

module.exports = { RESULTS, arg, record, within, check };
