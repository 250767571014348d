import AsyncHTTPClient
import Egress
import FleetAuth
import JSON
import NIOCore
import NIOHTTP1

/// The HTTP calls signers make: small JSON or form requests with a deadline. Signer
/// traffic is light, so it goes on process-wide clients that need no shutdown:
/// AsyncHTTPClient's shared one for the standard egress, otherwise one per egress
/// (trust anchors, proxy) and per proxied-or-direct. Failures become `SignerError`s
/// that name the peer but never echo headers, which carry credentials.
public final class SignerHTTP: Sendable {
    public struct Response: Sendable {
        public let status: Int
        public let body: [UInt8]
    }

    private let timeout: Duration
    private let egress: Egress
    private static let maximumBodyBytes = 1 << 20

    public init(timeout: Duration = .seconds(10), egress: Egress = .standard) {
        self.timeout = timeout
        self.egress = egress
    }

    /// Throws `SignerError` (reason `unavailable`) when the peer cannot be reached or does not answer in time.
    /// - Parameter peer: names the service in errors ("token service", "IAM signJwt").
    public func send(_ method: HTTPMethod, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
                     peer: String, signer: String) async throws -> Response {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let seconds = timeout.components.seconds
        do {
            let response = try await egress.sharedHTTPClient(for: url).execute(request, timeout: .seconds(seconds))
            let body = try await response.body.collect(upTo: Self.maximumBodyBytes)
            return Response(status: Int(response.status.code), body: Array(buffer: body))
        } catch let error as HTTPClientError where error == .deadlineExceeded {
            throw SignerError(signer: signer, reason: .unavailable, "\(peer) did not answer within \(seconds) s")
        } catch {
            let failure = TransportFailure.describe(error)
            throw SignerError(signer: signer, reason: .unavailable, "cannot reach \(peer): \(failure.message)",
                              transportCause: failure.cause.rawValue)
        }
    }
}

extension SignerError {
    /// The error for a non-2xx answer: 429 and 5xx are the peer being unavailable.
    static func status(_ status: Int, from peer: String, signer: String, body: [UInt8]) -> SignerError {
        let reason: Reason = status == 429 || status >= 500 ? .unavailable : .refused
        let message = errorMessage(body).map { ": \($0)" } ?? ""
        return SignerError(signer: signer, reason: reason, "\(peer) answered HTTP \(status)\(message)")
    }
}

/// A Google API error's `error.message`, or an OAuth error's `error` and
/// `error_description`, shortened: enough to diagnose, never a whole body.
func errorMessage(_ body: [UInt8]) -> String? {
    guard let document = try? JSONParser.parse(body) else { return nil }
    let message = document["error"]?["message"]?.stringValue
        ?? document["error"]?.stringValue.map { code in
            document["error_description"]?.stringValue.map { "\(code): \($0)" } ?? code
        }
    return message.map { String($0.prefix(200)) }
}
