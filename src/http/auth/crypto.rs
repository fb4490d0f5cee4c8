//! jsonwebtoken's signature checks done by ring, the crypto library mcpgate
//! already links for TLS: a verifier for RS256/384/512, PS256/384/512,
//! ES256/384 and EdDSA (Ed25519). mcpgate never signs, and never accepts
//! HMAC (a resource server shares no secret with the issuer): asking for
//! either is an error, never a panic.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::signature::{self as ring_sig, RsaParameters, UnparsedPublicKey, VerificationAlgorithm};

/// The provider installed for the whole process (jsonwebtoken has one).
static RING: CryptoProvider = CryptoProvider {
    signer_factory: no_signer,
    verifier_factory: verifier,
    key_utils: KeyUtils {
        rsa_pub_components_from_private_key: |_| Err(ErrorKind::UnsupportedAlgorithm.into()),
        rsa_pub_components_from_public_key: |_| Err(ErrorKind::UnsupportedAlgorithm.into()),
        ec_pub_components_from_private_key: |_, _| Err(ErrorKind::UnsupportedAlgorithm.into()),
        ed_pub_components_from_private_key: |_, _| Err(ErrorKind::UnsupportedAlgorithm.into()),
        compute_digest: |_, _| Err(ErrorKind::UnsupportedAlgorithm.into()),
    },
};

/// Makes ring jsonwebtoken's crypto; before the first token is checked.
pub(crate) fn install() {
    // Installed already (by an earlier call): the same provider.
    let _ = RING.install_default();
}

fn no_signer(_: &Algorithm, _: &EncodingKey) -> Result<Box<dyn JwtSigner>, Error> {
    Err(ErrorKind::UnsupportedAlgorithm.into())
}

/// How ring checks one algorithm.
enum Check {
    Rsa(&'static RsaParameters),
    Other(&'static dyn VerificationAlgorithm),
}

fn verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    let check = match algorithm {
        Algorithm::RS256 => Check::Rsa(&ring_sig::RSA_PKCS1_2048_8192_SHA256),
        Algorithm::RS384 => Check::Rsa(&ring_sig::RSA_PKCS1_2048_8192_SHA384),
        Algorithm::RS512 => Check::Rsa(&ring_sig::RSA_PKCS1_2048_8192_SHA512),
        Algorithm::PS256 => Check::Rsa(&ring_sig::RSA_PSS_2048_8192_SHA256),
        Algorithm::PS384 => Check::Rsa(&ring_sig::RSA_PSS_2048_8192_SHA384),
        Algorithm::PS512 => Check::Rsa(&ring_sig::RSA_PSS_2048_8192_SHA512),
        Algorithm::ES256 => Check::Other(&ring_sig::ECDSA_P256_SHA256_FIXED),
        Algorithm::ES384 => Check::Other(&ring_sig::ECDSA_P384_SHA384_FIXED),
        Algorithm::EdDSA => Check::Other(&ring_sig::ED25519),
        // HMAC, and any algorithm jsonwebtoken adds later: never.
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    };
    if key.family() != algorithm.family() {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    Ok(Box::new(Verifier { algorithm: *algorithm, check, key: key.clone() }))
}

struct Verifier {
    algorithm: Algorithm,
    check: Check,
    key: DecodingKey,
}

impl signature::Verifier<Vec<u8>> for Verifier {
    fn verify(&self, message: &[u8], sig: &Vec<u8>) -> Result<(), signature::Error> {
        let checked = match (&self.check, self.key.kind()) {
            (Check::Rsa(params), DecodingKeyKind::RsaModulusExponent { n, e }) => {
                ring_sig::RsaPublicKeyComponents { n, e }.verify(params, message, sig)
            }
            (Check::Rsa(params), DecodingKeyKind::SecretOrDer(der)) => {
                UnparsedPublicKey::new(*params, der).verify(message, sig)
            }
            (Check::Other(algorithm), DecodingKeyKind::SecretOrDer(bytes)) => {
                UnparsedPublicKey::new(*algorithm, bytes).verify(message, sig)
            }
            (Check::Other(_), DecodingKeyKind::RsaModulusExponent { .. }) => return Err(signature::Error::new()),
        };
        checked.map_err(|_| signature::Error::new())
    }
}

impl JwtVerifier for Verifier {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}
