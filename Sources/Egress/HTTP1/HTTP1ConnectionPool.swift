import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// Keep-alive HTTP/1.1 connections to one origin, plain or TLS (ALPN `http/1.1`): a
/// request takes an idle connection, or makes one, and gives it back when the answer is
/// read whole. The caller bounds concurrency; `maximumIdle` connections are kept.
/// A connection that cannot be made fails its request at once.
public final class HTTP1ConnectionPool: Sendable {
    private let origin: EgressOrigin
    private let maximumIdle: Int
    private let eventLoopGroup: any EventLoopGroup
    /// Most recently used last, so that few connections stay busy and the others time out.
    private let idle = Mutex<[HTTP1Connection]>([])

    /// - Parameter tls: TLS to the origin with the egress's trust anchors, or nil for plain http.
    public init(host: String, port: Int, egress: Egress, tls: Bool, maximumIdle: Int,
                connectTimeout: TimeAmount, requestTimeout: TimeAmount,
                eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) throws {
        self.origin = EgressOrigin(host: host, port: port, tls: tls ? try egress.tlsContext(alpn: ["http/1.1"]) : nil,
                                   proxy: tls ? egress.proxy.server(forHost: host) : nil,
                                   connectTimeout: connectTimeout, requestTimeout: requestTimeout)
        self.maximumIdle = max(1, maximumIdle)
        self.eventLoopGroup = eventLoopGroup
    }

    public func execute(_ request: EgressRequest) async throws -> EgressResponse {
        let connection = try await lease()
        let response = try await connection.execute(request)
        giveBack(connection)
        return response
    }

    /// Idle connections that can still carry a request.
    var usableIdleConnections: Int { idle.withLock { $0.filter(\.isUsable).count } }

    /// Closes the idle connections; those under way close as their requests end.
    public func shutdown() async {
        for connection in idle.withLock({ idle in defer { idle.removeAll() }; return idle }) { connection.close() }
    }

    private func lease() async throws -> HTTP1Connection {
        while let connection = idle.withLock({ Self.takeLocalOrLast(&$0) }) {
            if connection.isUsable { return connection }
        }
        // The caller's own loop when it is one of the group's (a worker's), so its requests need no hop.
        let connection = try await HTTP1Connection.connect(to: origin, on: eventLoopGroup.any()).get()
        if Task.isCancelled {
            giveBack(connection)
            throw CancellationError()
        }
        return connection
    }

    /// The most recently used connection on the caller's event loop, so that a task
    /// running there needs no hop; else the most recently used.
    private static func takeLocalOrLast(_ idle: inout [HTTP1Connection]) -> HTTP1Connection? {
        if let index = idle.lastIndex(where: \.isLocal) { return idle.remove(at: index) }
        return idle.popLast()
    }

    private func giveBack(_ connection: HTTP1Connection) {
        guard connection.isUsable else { return }
        let kept = idle.withLock { idle in
            guard idle.count < maximumIdle else { return false }
            idle.append(connection)
            return true
        }
        if !kept { connection.close() }
    }
}

/// One keep-alive HTTP/1.1 connection, one request at a time.
typealias HTTP1Connection = EgressConnection<HTTP1ExchangeHandler>

extension EgressConnection where Handler == HTTP1ExchangeHandler {
    /// TCP, proxy tunnel and TLS when the origin has them, then NIO's HTTP/1.1 codec and the
    /// exchange handler.
    static func connect(to origin: EgressOrigin, on eventLoop: any EventLoop) -> EventLoopFuture<HTTP1Connection> {
        EgressConnector.connect(to: origin, on: eventLoop) { channel, negotiated in
            if origin.tls != nil, let negotiated, negotiated != "http/1.1" {
                throw ExchangeError.malformedResponse("TLS negotiated \(negotiated), not http/1.1")
            }
            let state = ConnectionState()
            let handler = HTTP1ExchangeHandler(authority: origin.authority, requestTimeout: origin.requestTimeout, state: state)
            // Bytes after an answer nobody asked for are an error, not the next answer.
            try channel.pipeline.syncOperations.addHandlers([
                HTTPRequestEncoder(), ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .fireError)), handler,
            ])
            return HTTP1Connection(channel: channel, handler: handler, state: state)
        }
    }
}
