import NIOCore
import NIOHTTP2
import NIOSSL

/// One TLS connection speaking HTTP/2, in a pool: requests are streams on it. They hop onto
/// its event loop (unless the caller runs there), and cancelling the caller's task cancels the
/// request there.
final class HTTP2Connection: Sendable {
    private let channel: any Channel
    private let handler: NIOLoopBound<HTTP2StreamsHandler>
    private let state: ConnectionState

    /// Called on the channel's event loop, where the handler lives.
    init(channel: any Channel, handler: HTTP2StreamsHandler, state: ConnectionState) {
        self.channel = channel
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
        self.state = state
    }

    /// False once no new request may start on it (closed, GOAWAY, stream IDs used up, silent, idle).
    var isUsable: Bool { state.isUsable }

    /// The server's stream limit as last announced; nil before its first SETTINGS.
    var streamLimit: Int? { state.streamLimit }

    /// Whether the caller runs on this connection's event loop.
    var isLocal: Bool { channel.eventLoop.inEventLoop }

    func execute(_ request: EgressRequest) async throws -> EgressResponse {
        let exchange = Exchange(request)
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { completion in
                if channel.eventLoop.inEventLoop {
                    handler.value.start(exchange, completion: .task(completion))
                } else {
                    channel.eventLoop.execute { [handler] in handler.value.start(exchange, completion: .task(completion)) }
                }
            }
        } onCancel: { [channel, handler] in
            channel.eventLoop.execute { handler.value.cancel(exchange) }
        }
    }

    /// Starts `request` from this connection's event loop; `completion` is resumed there, once.
    func start(_ request: EgressRequest, completion: Exchange.Completion) -> Exchange {
        let exchange = Exchange(request)
        handler.value.start(exchange, completion: completion)
        return exchange
    }

    /// Ends an exchange started from this event loop: its completion hears a `CancellationError`.
    func cancel(_ exchange: Exchange) {
        handler.value.cancel(exchange)
    }

    func close() {
        channel.close(promise: nil)
    }
}

extension HTTP2Connection {
    /// TCP, proxy tunnel and TLS, then HTTP/2 when ALPN chose `h2`.
    static func connect(to origin: EgressOrigin, on eventLoop: any EventLoop) -> EventLoopFuture<HTTP2Connection> {
        EgressConnector.connect(to: origin, on: eventLoop) { channel, negotiated in
            guard negotiated == "h2" else { throw ExchangeError.http2NotNegotiated(negotiated) }
            let state = ConnectionState()
            let handler = HTTP2StreamsHandler(authority: origin.authority, requestTimeout: origin.requestTimeout,
                                              liveness: origin.liveness, state: state)
            try channel.pipeline.syncOperations.addHandler(handler)
            return HTTP2Connection(channel: channel, handler: handler, state: state)
        }
    }
}

/// How an HTTP/2 connection tells a live server from a dead path, and when it is no longer
/// worth keeping: after `pingAfterSilence` without a frame from the server it sends a PING;
/// without the answer within `pingTimeout` the connection is closed as dead and its streams
/// fail at once, instead of each waiting for its request timeout. A connection without a
/// stream for `idleTimeout` is closed.
public struct HTTP2Liveness: Sendable {
    public var pingAfterSilence: TimeAmount
    public var pingTimeout: TimeAmount
    public var idleTimeout: TimeAmount

    public init(pingAfterSilence: TimeAmount = .seconds(5), pingTimeout: TimeAmount = .seconds(5),
                idleTimeout: TimeAmount = .seconds(60)) {
        self.pingAfterSilence = pingAfterSilence
        self.pingTimeout = pingTimeout
        self.idleTimeout = idleTimeout
    }
}
