import NIOCore
import NIOHTTP2
import NIOSSL

/// One TLS connection speaking HTTP/2; requests are streams on it.
typealias HTTP2Connection = EgressConnection<HTTP2StreamsHandler>

extension EgressConnection where Handler == HTTP2StreamsHandler {
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
