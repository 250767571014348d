/// Why a signer produced no token. Messages name the signer and the problem,
/// never a token, key or credential.
public struct SignerError: Error, Sendable, CustomStringConvertible {
    public enum Reason: String, Sendable, CaseIterable {
        /// The signer could not be reached, timed out or answered 5xx/429.
        case unavailable
        /// The signer refused the request (4xx other than 429).
        case refused
        /// The answer was not the JSON expected.
        case badResponse = "bad_response"
        /// A token came back but does not fit this vehicle or Fleet Engine: never used.
        case rejectedToken = "rejected_token"
        /// No OAuth access token for calling the signer (Application Default Credentials).
        case credentials
        /// Local signing failed.
        case signing
    }

    public let signer: String
    public let reason: Reason
    public let message: String
    /// How the way to the signer failed, when it did (`tls`, `proxy`, `connection`, `timeout`):
    /// `tls` and `proxy` are configuration no retry mends.
    public let transportCause: String?

    public init(signer: String, reason: Reason, _ message: String, transportCause: String? = nil) {
        self.signer = signer
        self.reason = reason
        self.message = message
        self.transportCause = transportCause
    }

    public var description: String { "\(signer) signer: \(message)" }

    /// The message of a `SignerError`, or any other error's description.
    public static func message(of error: any Error) -> String {
        (error as? SignerError)?.message ?? "\(error)"
    }
}
