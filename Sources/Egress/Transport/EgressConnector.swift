import Foundation
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOTLS

/// Where the relay's own HTTP/2 connections go and how: the origin, TLS with the egress's
/// trust anchors, and the CONNECT proxy in between, if any.
struct EgressOrigin: Sendable {
    let host: String
    let port: Int
    let tls: NIOSSLContext
    let proxy: EgressProxy.Server?
    let connectTimeout: TimeAmount
    let requestTimeout: TimeAmount
    var liveness = HTTP2Liveness()

    /// `host[:port]` as `:authority` and `Host` name it.
    var authority: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == 443 ? name : "\(name):\(port)"
    }
}

/// Opens a channel to an origin: TCP (through the proxy's CONNECT tunnel if there is one),
/// then TLS with the protocols the context offers by ALPN. The connect timeout bounds all
/// of it.
enum EgressConnector {
    /// The channel, and the protocol ALPN chose (nil without TLS or without a choice).
    /// `setUp` adds the protocol's handlers, still within the connect timeout.
    static func connect<Connection: Sendable>(
        to origin: EgressOrigin, on eventLoop: any EventLoop,
        setUp: @escaping @Sendable (any Channel, String?) throws -> Connection
    ) -> EventLoopFuture<Connection> {
        let (host, port) = origin.proxy.map { ($0.host, $0.port) } ?? (origin.host, origin.port)
        return ClientBootstrap(group: eventLoop)
            .connectTimeout(origin.connectTimeout)
            .connect(host: host, port: port)
            .flatMap { channel in
                let established = channel.eventLoop.makePromise(of: Connection.self)
                let deadline = channel.eventLoop.scheduleTask(in: origin.connectTimeout) {
                    established.fail(ExchangeError.connectTimedOut(origin.connectTimeout))
                }
                establish(on: channel, to: origin).flatMapThrowing { negotiated in
                    try setUp(channel, negotiated)
                }.cascade(to: established)
                return established.futureResult.always { _ in deadline.cancel() }.flatMapErrorThrowing { error in
                    channel.close(promise: nil)
                    throw error
                }
            }
    }

    private static func establish(on channel: any Channel, to origin: EgressOrigin) -> EventLoopFuture<String?> {
        let tunnel = origin.proxy.map { openTunnel(on: channel, through: $0, to: origin) }
            ?? channel.eventLoop.makeSucceededVoidFuture()
        return tunnel.flatMap { startTLS(on: channel, to: origin, context: origin.tls) }
    }

    /// `CONNECT host:port` with the proxy's credentials.
    private static func openTunnel(on channel: any Channel, through proxy: EgressProxy.Server,
                                   to origin: EgressOrigin) -> EventLoopFuture<Void> {
        let tunnelOpened = channel.eventLoop.makePromise(of: Void.self)
        var headers = HTTPHeaders()
        if let credentials = proxy.credentials {
            let token = Data("\(credentials.user):\(credentials.password)".utf8).base64EncodedString()
            headers.add(name: "Proxy-Authorization", value: "Basic " + token)
        }
        let encoder = HTTPRequestEncoder()
        let decoder = ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes))
        let connect = NIOHTTP1ProxyConnectHandler(targetHost: origin.host, targetPort: origin.port, headers: headers,
                                                  deadline: .now() + origin.connectTimeout, promise: tunnelOpened)
        do {
            try channel.pipeline.syncOperations.addHandlers([encoder, decoder, connect])
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        // The CONNECT handler leaves by itself once the tunnel stands. The proxy's answer
        // completes the promise while the HTTP/1 decoder is still reading it, and the decoder
        // leaves only after that: TLS begins once the codec is gone.
        return tunnelOpened.futureResult.assumeIsolated().flatMap {
            let pipeline = channel.pipeline.syncOperations
            let removals = [pipeline.removeHandler(decoder), pipeline.removeHandler(encoder)]
            return EventLoopFuture.andAllSucceed(removals, on: channel.eventLoop)
        }.nonisolated()
    }

    /// The TLS handshake with full verification; the protocol ALPN chose.
    private static func startTLS(on channel: any Channel, to origin: EgressOrigin,
                                 context: NIOSSLContext) -> EventLoopFuture<String?> {
        let negotiated = channel.eventLoop.makePromise(of: String?.self)
        do {
            // An address is verified against the certificate's IP entries; SNI carries names only.
            let serverName = origin.host.isIPAddress ? nil : origin.host
            try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: serverName))
            try channel.pipeline.syncOperations.addHandler(TLSHandshakeObserver(negotiated: negotiated))
        } catch {
            negotiated.fail(error)
        }
        return negotiated.futureResult
    }
}

/// Completes with the ALPN result when the handshake finishes, or with its failure;
/// then leaves the pipeline.
private final class TLSHandshakeObserver: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    private let negotiated: EventLoopPromise<String?>

    init(negotiated: EventLoopPromise<String?>) {
        self.negotiated = negotiated
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted(let named) = event as? TLSUserEvent {
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            negotiated.succeed(named)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        negotiated.fail(error)
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        negotiated.fail(ExchangeError.connectionClosed)
        context.fireChannelInactive()
    }
}

extension String {
    var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: self, port: 0)) != nil
    }
}
