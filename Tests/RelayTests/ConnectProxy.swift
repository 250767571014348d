import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// A minimal HTTP CONNECT proxy on loopback, as a corporate egress proxy: it reads
/// `CONNECT host:port`, opens the tunnel and then copies bytes both ways without
/// seeing inside the TLS. Counts the tunnels it opened, by target.
final class ConnectProxy: Sendable {
    /// Which CONNECT requests the proxy grants.
    enum Policy: Sendable {
        case open
        /// Every CONNECT answered 403, as a proxy whose rules do not allow the target.
        case refusing
        /// 407 unless `Proxy-Authorization: Basic` carries these credentials.
        case credentials(user: String, password: String)
    }

    let port: Int
    private let channel: any Channel
    private let log: TunnelLog

    private init(channel: any Channel, log: TunnelLog) {
        self.channel = channel
        self.port = channel.localAddress!.port!
        self.log = log
    }

    /// The `host:port` of every tunnel opened so far.
    var tunnels: [String] { log.targets.withLock { $0 } }

    var url: String { "http://127.0.0.1:\(port)" }

    /// CONNECT requests answered 403 or 407.
    var refusals: Int { log.refusals.withLock { $0 } }

    static func start(_ policy: Policy = .open) async throws -> ConnectProxy {
        let log = TunnelLog()
        let recorder: @Sendable (String?) -> Void = { target in
            if let target { log.targets.withLock { $0.append(target) } } else { log.refusals.withLock { $0 += 1 } }
        }
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ConnectRequestHandler(policy: policy, recorder: recorder))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return ConnectProxy(channel: channel, log: log)
    }

    func shutdown() async {
        try? await channel.close()
    }
}

private final class TunnelLog: Sendable {
    let targets = Mutex<[String]>([])
    let refusals = Mutex(0)
}

/// Reads the CONNECT request head, opens the outbound connection, answers 200 and glues
/// the two channels together.
private final class ConnectRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let policy: ConnectProxy.Policy
    /// A tunnel's target, or nil for a refusal.
    private let recorder: @Sendable (String?) -> Void
    private var head = ByteBuffer()

    init(policy: ConnectProxy.Policy, recorder: @escaping @Sendable (String?) -> Void) {
        self.policy = policy
        self.recorder = recorder
    }

    /// The answer refusing the request, or nil when the policy grants it.
    private func refusal(_ head: String) -> String? {
        switch policy {
        case .open:
            return nil
        case .refusing:
            return "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"
        case .credentials(let user, let password):
            let expected = "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
            let given = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("proxy-authorization:") }
                .map { $0.dropFirst("proxy-authorization:".count).trimmingCharacters(in: .whitespaces) }
            return given == expected ? nil
                : "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"egress\"\r\nContent-Length: 0\r\n\r\n"
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var chunk = unwrapInboundIn(data)
        head.writeBuffer(&chunk)
        let text = String(buffer: head)
        guard text.contains("\r\n\r\n") else { return }
        let requestLine = text.split(separator: "\r\n").first.map(String.init) ?? ""
        let parts = requestLine.split(separator: " ")
        guard parts.count == 3, parts[0] == "CONNECT", let colon = parts[1].lastIndex(of: ":"),
            let port = Int(parts[1][parts[1].index(after: colon)...])
        else {
            respond("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", closing: true, context: context)
            return
        }
        if let refusal = refusal(text) {
            recorder(nil)
            respond(refusal, closing: true, context: context)
            return
        }
        let host = String(parts[1][..<colon])
        recorder(String(parts[1]))
        let inbound = context.channel
        let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        ClientBootstrap(group: context.eventLoop).connect(host: host, port: port).hop(to: inbound.eventLoop)
            .whenComplete { result in
                let context = boundContext.value
                switch result {
                case .failure:
                    handler.value.respond("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n", closing: true, context: context)
                case .success(let outbound):
                    handler.value.respond("HTTP/1.1 200 Connection established\r\n\r\n", closing: false, context: context)
                    let (local, remote) = GlueHandler.matchedPair()
                    do {
                        try context.pipeline.syncOperations.addHandler(local)
                        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
                        outbound.pipeline.addHandler(remote).whenComplete { _ in
                            inbound.setOption(ChannelOptions.autoRead, value: true).whenComplete { _ in }
                        }
                    } catch {
                        context.close(promise: nil)
                        outbound.close(promise: nil)
                    }
                }
            }
    }

    private func respond(_ text: String, closing: Bool, context: ChannelHandlerContext) {
        let done = context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: text)))
        if closing {
            let channel = context.channel
            done.whenComplete { _ in channel.close(promise: nil) }
        }
    }
}

/// Copies bytes between two channels, each the other's partner (NIO's connect-proxy example).
private final class GlueHandler: ChannelDuplexHandler, @unchecked Sendable {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny
    typealias OutboundOut = NIOAny

    private var partner: GlueHandler?
    private var context: ChannelHandlerContext?
    private var pendingRead = false

    static func matchedPair() -> (GlueHandler, GlueHandler) {
        let first = GlueHandler()
        let second = GlueHandler()
        first.partner = second
        second.partner = first
        return (first, second)
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        partner = nil
    }

    // Both channels of a tunnel live on the same event loop (the outbound one is made on the inbound's).
    private func partnerWrite(_ data: NIOAny) { context?.write(data, promise: nil) }
    private func partnerFlush() { context?.flush() }
    private func partnerWriteEOF() { context?.close(mode: .output, promise: nil) }
    private func partnerCloseFull() { context?.close(promise: nil) }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) { partner?.partnerWrite(data) }
    func channelReadComplete(context: ChannelHandlerContext) { partner?.partnerFlush() }
    func channelInactive(context: ChannelHandlerContext) { partner?.partnerCloseFull() }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, case .inputClosed = event { partner?.partnerWriteEOF() }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { partner?.partnerCloseFull() }
}
