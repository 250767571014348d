import NIOCore
import NIOHTTP2

/// One request and what has come back of its answer so far. Created by the caller's
/// task, then touched only on the connection's event loop.
final class Exchange: @unchecked Sendable {
    /// Resumed once: the streams' state machine ends each stream once (tested).
    typealias Completion = ExchangeCompletion

    /// Answers are small JSON; a larger one is refused rather than buffered.
    static let maximumBodyBytes = 1 << 20

    let request: EgressRequest
    /// A gRPC call's outcome is in `grpc-status` and a `Retry-After` means nothing; a REST
    /// answer is the other way round. Each answer is searched for its own fields only.
    let isGRPC: Bool
    var completion: Completion?
    var isCancelled = false
    var streamID: HTTP2StreamID?
    /// The body not yet sent: the server's windows hold it back.
    var unsentBody: ByteBuffer?
    private(set) var status: Int?
    private(set) var retryAfter: String?
    private(set) var grpc: GRPCStatusFields?
    private var body: ByteBuffer?

    init(_ request: EgressRequest) {
        self.request = request
        self.isGRPC = request.contentType == "application/grpc"
    }

    /// The final status (≥ 200) and its Retry-After; informational answers are skipped.
    /// False when it is informational.
    func receivedStatus(_ status: Int, retryAfter: String?) -> Bool {
        guard status >= 200 else { return false }
        self.status = status
        self.retryAfter = retryAfter
        return true
    }

    /// gRPC's status, from the trailers or a trailers-only answer's headers.
    func receivedGRPCStatus(_ fields: GRPCStatusFields) {
        grpc = fields
    }

    /// Appends to the body; throws past `maximumBodyBytes`. An empty frame (one that only ends
    /// the stream) changes nothing: appending it to the body, a slice of the read buffer, would
    /// copy the body into a buffer of its own.
    func receivedBody(_ bytes: inout ByteBuffer) throws {
        guard bytes.readableBytes > 0 else { return }
        if body == nil {
            body = bytes
        } else {
            body!.writeBuffer(&bytes)
        }
        if body!.readableBytes > Self.maximumBodyBytes { throw ExchangeError.responseTooLarge(Self.maximumBodyBytes) }
    }

    /// The whole answer, once it ended.
    func response() throws -> EgressResponse {
        guard let status else { throw ExchangeError.malformedResponse("the answer ended without a status") }
        return EgressResponse(status: status, retryAfter: retryAfter, grpc: grpc, body: body ?? ByteBuffer())
    }
}

/// How the caller of an exchange hears its end, once: a task suspended for it, or a receiver
/// on the connection's event loop (a caller there that starts its next request from the
/// answer, without a task resumed in between), through the pool that lent it the connection.
enum ExchangeCompletion {
    case task(UnsafeContinuation<EgressResponse, any Error>)
    case pooled(PooledCompletion)

    /// A request `HTTP2ConnectionPool.start` started: the pool's slot it holds and who hears the
    /// answer. Kept in the exchange, it costs a request no closure of its own.
    struct PooledCompletion {
        let pool: HTTP2ConnectionPool
        let slot: Int
        let receiver: any EgressAnswerReceiver
    }

    func resume(returning response: EgressResponse) { resume(with: .success(response)) }

    func resume(throwing error: any Error) { resume(with: .failure(error)) }

    func resume(with result: Result<EgressResponse, any Error>) {
        switch self {
        case .task(let continuation): continuation.resume(with: result)
        case .pooled(let pooled): pooled.pool.ended(slot: pooled.slot, with: result, answering: pooled.receiver)
        }
    }
}

/// Hears the end of a request `HTTP2ConnectionPool.start` started, on the connection's event
/// loop, once: the answer, or why there is none. A long-lived receiver (a worker with one
/// request under way at a time) keeps what it needs of the request itself, so that starting a
/// request allocates no closure to carry it to the answer.
public protocol EgressAnswerReceiver: AnyObject, Sendable {
    func received(_ result: Result<EgressResponse, any Error>)
}
