import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL

public typealias HTTPResponder = @Sendable (HTTPRequest) async -> HTTPResponse

/// Answers a request on its connection's event loop when it can without waiting; nil when it
/// cannot, and the `HTTPResponder` answers it in a task of its own.
public typealias HTTPImmediateResponder = @Sendable (HTTPRequest) -> HTTPResponse?

/// How a server answers: at once where it can, else in a task.
struct HTTPResponders: Sendable {
    let atOnce: HTTPImmediateResponder?
    let inTask: HTTPResponder
}

/// A small HTTP server on SwiftNIO for the emulators (Fleet Engine, the signers' services, the
/// Schema Registry): plain HTTP/1.1, or HTTPS offering HTTP/2 and HTTP/1.1 through ALPN as
/// Google's front ends do; keep-alive, bounded request bodies, one async responder for every
/// route, and hooks for the emulator's faults and counters. The relay's ops endpoint has a
/// plain server of its own.
public final class HTTPServer: Sendable {
    public static let maximumBodyBytes = 1 << 20

    public struct Options: Sendable {
        /// Serve HTTPS with this certificate; nil serves plain HTTP/1.1.
        public var tls: ServerTLS?
        /// SETTINGS_MAX_CONCURRENT_STREAMS announced to HTTP/2 clients (Google's front ends say 100).
        public var maximumConcurrentStreams: Int
        /// SETTINGS_INITIAL_WINDOW_SIZE announced to HTTP/2 clients: how much of a request body a
        /// client may send on a stream before the server's WINDOW_UPDATE (nil: HTTP/2's 65,535).
        public var streamWindow: Int?
        /// Makes the observer of each HTTP/2 connection's streams (the emulator's faults).
        public var observeHTTP2Connection: (@Sendable (any Channel, HTTPServerStatistics) -> any HTTP2ConnectionObserver)?
        /// Adds handlers at the network end of every accepted connection, before TLS (the
        /// emulator's network faults, such as a path that goes silent).
        public var prepareConnection: (@Sendable (any Channel) throws -> Void)?

        public init(tls: ServerTLS? = nil, maximumConcurrentStreams: Int = 100, streamWindow: Int? = nil,
                    observeHTTP2Connection: (@Sendable (any Channel, HTTPServerStatistics) -> any HTTP2ConnectionObserver)? = nil,
                    prepareConnection: (@Sendable (any Channel) throws -> Void)? = nil) {
            self.tls = tls
            self.maximumConcurrentStreams = maximumConcurrentStreams
            self.streamWindow = streamWindow
            self.observeHTTP2Connection = observeHTTP2Connection
            self.prepareConnection = prepareConnection
        }
    }

    private let channel: any Channel
    public let host: String
    public let port: Int
    public let isSecure: Bool
    public let statistics: HTTPServerStatistics

    private init(channel: any Channel, host: String, port: Int, isSecure: Bool, statistics: HTTPServerStatistics) {
        self.channel = channel
        self.host = host
        self.port = port
        self.isSecure = isSecure
        self.statistics = statistics
    }

    /// Binds and starts serving. `port` 0 picks a free port (see `port`).
    /// - Parameters:
    ///   - answeringAtOnce: answers what it can on the event loop the request arrived on, saving
    ///     the task and the two thread hops of `responder` (a server under load, such as the
    ///     emulator in a benchmark); it must not block.
    ///   - responder: answers every request `answeringAtOnce` did not.
    public static func start(host: String, port: Int, options: Options = .init(),
                             answeringAtOnce: HTTPImmediateResponder? = nil,
                             responder: @escaping HTTPResponder) async throws -> HTTPServer {
        let responder = HTTPResponders(atOnce: answeringAtOnce, inTask: responder)
        let statistics = HTTPServerStatistics()
        let sslContext = try options.tls.map { try NIOSSLContext(configuration: $0.configuration) }
        let (streams, window, observe) = (options.maximumConcurrentStreams, options.streamWindow, options.observeHTTP2Connection)
        let prepareConnection = options.prepareConnection
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                statistics.count(\.connections)
                channel.closeFuture.whenComplete { _ in statistics.count(\.connectionsClosed) }
                do {
                    try channel.pipeline.syncOperations.addHandler(WireByteCounter(statistics: statistics))
                    try prepareConnection?(channel)
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
                guard let sslContext else {
                    return channel.eventLoop.makeCompletedFuture {
                        try configureHTTP1(channel, responder: responder, statistics: statistics)
                    }
                }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                }.flatMap {
                    channel.configureHTTP2SecureUpgrade(
                        h2ChannelConfigurator: { connection in
                            configureHTTP2(connection, maximumConcurrentStreams: streams, streamWindow: window,
                                           observer: observe?(connection, statistics),
                                           responder: responder, statistics: statistics)
                        },
                        http1ChannelConfigurator: { connection in
                            connection.eventLoop.makeCompletedFuture {
                                try configureHTTP1(connection, responder: responder, statistics: statistics)
                            }
                        })
                }
            }
        let channel = try await bootstrap.bind(host: host, port: port).get()
        return HTTPServer(channel: channel, host: host, port: channel.localAddress?.port ?? port,
                          isSecure: sslContext != nil, statistics: statistics)
    }

    public var baseURL: String { "\(isSecure ? "https" : "http")://\(host.contains(":") ? "[\(host)]" : host):\(port)" }

    public func shutdown() async {
        try? await channel.close()
    }

    private static func configureHTTP1(_ channel: any Channel, responder: HTTPResponders,
                                       statistics: HTTPServerStatistics) throws {
        try channel.pipeline.syncOperations.configureHTTPServerPipeline()
        try channel.pipeline.syncOperations.addHandler(
            RequestHandler(responder: responder, statistics: statistics, servedProtocol: .http1))
    }

    private static func configureHTTP2(_ connection: any Channel, maximumConcurrentStreams: Int, streamWindow: Int?,
                                       observer: (any HTTP2ConnectionObserver)?, responder: HTTPResponders,
                                       statistics: HTTPServerStatistics) -> EventLoopFuture<Void> {
        var configuration = NIOHTTP2Handler.ConnectionConfiguration()
        configuration.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: maximumConcurrentStreams),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 1 << 16),
        ]
        if let streamWindow { configuration.initialSettings.append(HTTP2Setting(parameter: .initialWindowSize, value: streamWindow)) }
        do {
            try connection.pipeline.syncOperations.addHandler(FlushCoalescer())
            if observer != nil { try connection.pipeline.syncOperations.addHandler(FramesBeneathHTTP2()) }
        } catch {
            return connection.eventLoop.makeFailedFuture(error)
        }
        return connection.configureHTTP2Pipeline(
            mode: .server, connectionConfiguration: configuration, streamConfiguration: .init()
        ) { stream in
            stream.eventLoop.makeCompletedFuture {
                try stream.pipeline.syncOperations.addHandler(AuthorizationIndexingWatch(statistics: statistics))
                try stream.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTP1ServerCodec())
                try stream.pipeline.syncOperations.addHandler(
                    RequestHandler(responder: responder, statistics: statistics, servedProtocol: .http2(observer)))
            }
        }.map { _ in }
    }
}

/// Counts `authorization` fields a client sent without HPACK's never-indexed representation
/// (RFC 7541 §7.1.3): a token such a field carries may be kept in a compression table along the
/// way. The HTTP/1 codec that follows forgets how a field was encoded, so this looks first.
final class AuthorizationIndexingWatch: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias InboundOut = HTTP2Frame.FramePayload

    private let statistics: HTTPServerStatistics

    init(statistics: HTTPServerStatistics) {
        self.statistics = statistics
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .headers(let headers) = unwrapInboundIn(data) {
            for field in headers.headers where field.name == "authorization" {
                statistics.count(field.indexable == .neverIndexed ? \.authorizationsNeverIndexed : \.authorizationsIndexable)
            }
        }
        context.fireChannelRead(data)
    }
}

/// Counts the bytes a connection carries either way as they cross the socket (TLS records
/// included): what a protocol costs on the wire.
final class WireByteCounter: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let statistics: HTTPServerStatistics

    init(statistics: HTTPServerStatistics) {
        self.statistics = statistics
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        statistics.addBytes(received: unwrapInboundIn(data).readableBytes)
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        statistics.addBytes(sent: unwrapOutboundIn(data).readableBytes)
        context.write(data, promise: promise)
    }
}
