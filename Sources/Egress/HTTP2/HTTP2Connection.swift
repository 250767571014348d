import NIOCore
import NIOHTTP2
import NIOSSL

/// One TLS connection speaking HTTP/2; requests are streams on it.
final class HTTP2Connection: Sendable {
    private let channel: any Channel
    private let handler: NIOLoopBound<HTTP2StreamsHandler>
    private let state: ConnectionState

    private init(channel: any Channel, handler: HTTP2StreamsHandler, state: ConnectionState) {
        self.channel = channel
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
        self.state = state
    }

    /// False once the server said GOAWAY, the connection closed, or its stream IDs ran out.
    var isAcceptingStreams: Bool { state.isUsable }

    /// Cancelling the caller's task ends the request at once and resets its stream.
    func execute(_ request: EgressRequest) async throws -> EgressResponse {
        let exchange = HTTP2Exchange(request)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { completion in
                channel.eventLoop.execute { [handler] in handler.value.start(exchange, completion: completion) }
            }
        } onCancel: { [channel, handler] in
            channel.eventLoop.execute { handler.value.cancel(exchange) }
        }
    }

    func close() async {
        try? await channel.close()
    }

    /// TCP, proxy tunnel and TLS, then HTTP/2 when ALPN chose `h2`.
    static func connect(to origin: EgressOrigin, on eventLoop: any EventLoop) -> EventLoopFuture<HTTP2Connection> {
        EgressConnector.connect(to: origin, on: eventLoop) { channel, negotiated in
            guard negotiated == "h2" else { throw ExchangeError.http2NotNegotiated(negotiated) }
            let state = ConnectionState()
            let handler = HTTP2StreamsHandler(authority: origin.authority, requestTimeout: origin.requestTimeout, state: state)
            let pipeline = channel.pipeline.syncOperations
            // Header validation would check every header the relay itself composes; the
            // answers' headers are read for :status and retry-after only.
            try pipeline.addHandler(NIOHTTP2Handler(mode: .client, initialSettings: HTTP2StreamsHandler.initialSettings,
                                                    headerBlockValidation: .disabled))
            try pipeline.addHandler(handler)
            return HTTP2Connection(channel: channel, handler: handler, state: state)
        }
    }
}
