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
