import NIOCore
import NIOHTTP2

/// The channel handler at the end of a connection's pipeline, which runs its exchanges.
/// Both are called on the connection's event loop.
protocol ExchangeHandler: AnyObject, SendableMetatype {
    func start(_ exchange: Exchange, completion: Exchange.Completion)
    /// The caller's task was cancelled: end the exchange now, however far it got.
    func cancel(_ exchange: Exchange)
}

/// One connection of a pool: requests hop onto its event loop, and cancelling the caller's
/// task cancels the request there.
final class EgressConnection<Handler: ExchangeHandler>: Sendable {
    private let channel: any Channel
    private let handler: NIOLoopBound<Handler>
    private let state: ConnectionState

    /// Called on the channel's event loop, where the handler lives.
    init(channel: any Channel, handler: Handler, state: ConnectionState) {
        self.channel = channel
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
        self.state = state
    }

    /// False once no new request may start on it (closed, GOAWAY, stream IDs used up, silent, idle).
    var isUsable: Bool { state.isUsable }

    /// HTTP/2: the server's stream limit as last announced; nil before its first SETTINGS.
    var streamLimit: Int? { state.streamLimit }

    /// Whether the caller runs on this connection's event loop.
    var isLocal: Bool { channel.eventLoop.inEventLoop }

    func execute(_ request: EgressRequest) async throws -> EgressResponse {
        let exchange = Exchange(request)
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { completion in
                if channel.eventLoop.inEventLoop {
                    handler.value.start(exchange, completion: completion)
                } else {
                    channel.eventLoop.execute { [handler] in handler.value.start(exchange, completion: completion) }
                }
            }
        } onCancel: { [channel, handler] in
            channel.eventLoop.execute { handler.value.cancel(exchange) }
        }
    }

    func close() {
        channel.close(promise: nil)
    }
}

/// One request and what has come back of its answer so far. Created by the caller's
/// task, then touched only on the connection's event loop.
final class Exchange: @unchecked Sendable {
    /// Resumed once: the streams' state machine ends each stream once (tested).
    typealias Completion = UnsafeContinuation<EgressResponse, any Error>

    /// Answers are small JSON; a larger one is refused rather than buffered.
    static let maximumBodyBytes = 1 << 20

    let request: EgressRequest
    /// A gRPC call's outcome is in `grpc-status` and a `Retry-After` means nothing; a REST
    /// answer is the other way round. Each answer is searched for its own fields only.
    let isGRPC: Bool
    var completion: Completion?
    var isCancelled = false
    var streamID: HTTP2StreamID?
    /// HTTP/2: whether its HEADERS went out (a stream beyond the server's limit waits), the
    /// window the server allows it for DATA, and the body not yet sent.
    var isOpen = false
    var sendWindow = 0
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

    /// Appends to the body; throws past `maximumBodyBytes`.
    func receivedBody(_ bytes: inout ByteBuffer) throws {
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
