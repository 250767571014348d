import NIOCore
import NIOHTTP2

/// One request as the relay sends it: small, complete, and authorized per request.
public struct EgressRequest: Sendable {
    public var method: String
    /// Path and query.
    public var path: RequestPath
    /// The whole `Authorization` value. Over HTTP/2 it is sent never-indexed, so a
    /// token is never kept in the connection's header compression tables.
    public var authorization: String?
    /// A token sent as `Authorization: Bearer <token>`, instead of `authorization`: the scheme
    /// and the token (about a kilobyte) are written one after the other, never joined in memory.
    public var bearerToken: (any BearerToken)?
    public var contentType: String?
    /// Further headers, in order: gRPC's `te`, `grpc-timeout` and routing parameters.
    public var otherHeaders: [(name: String, value: String)]
    public var body: ByteBuffer?

    public init(method: String, path: String, authorization: String? = nil, bearerToken: (any BearerToken)? = nil, contentType: String? = nil,
                otherHeaders: [(name: String, value: String)] = [], body: ByteBuffer? = nil) {
        self.init(method: method, path: RequestPath(path), authorization: authorization, bearerToken: bearerToken,
                  contentType: contentType, otherHeaders: otherHeaders, body: body)
    }

    public init(method: String, path: RequestPath, authorization: String? = nil, bearerToken: (any BearerToken)? = nil,
                contentType: String? = nil, otherHeaders: [(name: String, value: String)] = [], body: ByteBuffer? = nil) {
        self.method = method
        self.path = path
        self.authorization = authorization
        self.bearerToken = bearerToken
        self.contentType = contentType
        self.otherHeaders = otherHeaders
        self.body = body
    }
}

/// A request's path and query in up to three parts, written one after the other where they are
/// sent: a client's fixed start, a name, a fixed end (a Fleet Engine update's provider path, its
/// vehicle and its update mask). Joined first, they cost every request a string.
public struct RequestPath: Sendable {
    public var start: String
    public var middle: String
    public var end: StaticString

    public init(_ path: String) {
        self.init(start: path, middle: "", end: "")
    }

    public init(start: String, middle: String, end: StaticString) {
        self.start = start
        self.middle = middle
        self.end = end
    }

    /// The length of the whole in bytes.
    public var utf8Count: Int { start.utf8.count + middle.utf8.count + end.utf8CodeUnitCount }

    /// The parts joined.
    public var text: String {
        var text = start
        text.reserveCapacity(utf8Count)
        text += middle
        text += end.description
        return text
    }
}

/// A bearer token's text, written where it is sent. A token kept compactly (a JWT kept decoded
/// from base64url) writes its text straight into the request's header block: made a `String`
/// first, it cost every request an allocation of about a kilobyte and a copy of it.
public protocol BearerToken: Sendable {
    /// The length of the token's text in bytes.
    var utf8Count: Int { get }
    /// Writes the text to the start of `output`, which holds at least `utf8Count` bytes.
    func write(into output: UnsafeMutableRawBufferPointer)
    /// The text, for an HTTP client that takes header values as strings.
    var text: String { get }
}

extension String: BearerToken {
    public var utf8Count: Int { utf8.count }

    public func write(into output: UnsafeMutableRawBufferPointer) {
        var text = self  // `withUTF8` may make the text contiguous, so it takes a `var`
        text.withUTF8 { output.copyMemory(from: UnsafeRawBufferPointer($0)) }
    }

    public var text: String { self }
}

/// What came back: the status, the headers and trailers the relay reads, and the body.
public struct EgressResponse: Sendable {
    public var status: Int
    public var retryAfter: String?
    /// gRPC's status from the trailers (or from the headers of a trailers-only answer).
    public var grpc: GRPCStatusFields?
    public var body: ByteBuffer

    public init(status: Int, retryAfter: String?, grpc: GRPCStatusFields? = nil, body: ByteBuffer) {
        self.status = status
        self.retryAfter = retryAfter
        self.grpc = grpc
        self.body = body
    }
}

/// The fields that carry a gRPC call's outcome, as they came: `grpc-status`, `grpc-message`
/// (still percent-encoded) and `grpc-status-details-bin` (base64 of a `google.rpc.Status`).
public struct GRPCStatusFields: Sendable, Equatable {
    public var status: String
    public var message: String?
    public var detailsBase64: String?

    public init(status: String, message: String? = nil, detailsBase64: String? = nil) {
        self.status = status
        self.message = message
        self.detailsBase64 = detailsBase64
    }
}

/// Why an exchange ended without an answer.
public enum ExchangeError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The server reset the stream (RST_STREAM) before answering.
    case streamReset(HTTP2ErrorCode)
    /// The server announced GOAWAY before it processed this stream; it may be sent again.
    case refusedByGoAway
    /// The connection was closing before the request was written; it may be sent again.
    case notSent
    /// The connection closed with the stream unanswered.
    case connectionClosed
    /// No answer within the request timeout; the stream was reset.
    case timedOut(TimeAmount)
    /// The server went silent and did not answer a PING within this time: the connection
    /// was closed as dead (a NAT or load balancer that dropped it without a word).
    case unresponsive(TimeAmount)
    /// TCP, the proxy tunnel and the TLS handshake together took longer than the connect timeout.
    case connectTimedOut(TimeAmount)
    /// TLS did not negotiate `h2` (ALPN); the server named this protocol instead.
    case http2NotNegotiated(String?)
    /// The server answered with something that is not an HTTP response.
    case malformedResponse(String)
    case responseTooLarge(Int)

    /// The server has certainly not processed the request (RFC 9113 §8.7): sending it again
    /// on another connection cannot apply it twice.
    public var isSafeToRetry: Bool {
        switch self {
        case .refusedByGoAway, .notSent, .streamReset(.refusedStream): true
        default: false
        }
    }

    public var description: String {
        switch self {
        case .streamReset(let code): "the server reset the stream (\(code))"
        case .refusedByGoAway: "the server closed the connection (GOAWAY) before processing the request"
        case .notSent: "the connection was closing before the request was sent"
        case .connectionClosed: "the connection closed before the answer arrived"
        case .timedOut(let timeout): "no answer within \(timeout.nanoseconds / 1_000_000) ms"
        case .unresponsive(let timeout): "the connection went silent and did not answer a PING within \(timeout.nanoseconds / 1_000_000) ms"
        case .connectTimedOut(let timeout): "no connection (TCP, proxy tunnel, TLS) within \(timeout.nanoseconds / 1_000_000) ms"
        case .http2NotNegotiated(let named):
            "TLS did not negotiate HTTP/2 (ALPN answered \(named.map { "\"\($0)\"" } ?? "nothing"))"
        case .malformedResponse(let reason): "malformed response: \(reason)"
        case .responseTooLarge(let limit): "response body larger than \(limit) bytes"
        }
    }
}
