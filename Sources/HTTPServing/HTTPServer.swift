import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A request as the responder sees it: fully read, body included.
public struct HTTPRequest: Sendable {
    public let method: String
    /// The path without the query, still percent-encoded.
    public let path: String
    public let query: [String: String]
    public let headers: [(name: String, value: String)]
    public let body: [UInt8]
    /// The connection the request came on: a slow responder can notice its client going away.
    public let connection: ClientConnection

    public init(method: String, path: String, query: [String: String], headers: [(name: String, value: String)],
                body: [UInt8], connection: ClientConnection = ClientConnection()) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.connection = connection
    }

    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public static func json(_ status: Int, _ body: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: Array(body.utf8))
    }

    public static func text(_ status: Int, _ body: String, contentType: String = "text/plain; charset=utf-8") -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", contentType)], body: Array(body.utf8))
    }
}

/// Whether a request's client still holds its connection. A responder that takes long (an
/// emulated slow backend) waits through `hold(for:)`, which ends early when the client closed
/// the connection, as a front end drops a request whose caller went away.
public final class ClientConnection: Sendable {
    private struct State {
        var closed = false
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0
    }

    private let state = Mutex(State())

    public init() {}

    public var isClosed: Bool { state.withLock(\.closed) }

    /// Waits for `duration`; false when the client closed the connection first.
    public func hold(for duration: Duration) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask { (try? await Task.sleep(for: duration)) != nil }
            group.addTask { await self.closed(); return false }
            let first = await group.next()!
            group.cancelAll()
            return first && !isClosed
        }
    }

    func close() {
        let waiters = state.withLock { state in
            state.closed = true
            defer { state.waiters = [:] }
            return state.waiters.values
        }
        waiters.forEach { $0.resume() }
    }

    /// Returns once the connection closed, or the task was cancelled.
    private func closed() async {
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state in
                    if state.closed || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}

public typealias HTTPResponder = @Sendable (HTTPRequest) async -> HTTPResponse

/// A small HTTP/1.1 server on SwiftNIO for the emulator and the ops endpoint:
/// keep-alive, bounded request bodies, one async responder for every route.
public final class HTTPServer: Sendable {
    public static let maximumBodyBytes = 1 << 20

    private let channel: any Channel
    public let host: String
    public let port: Int

    private init(channel: any Channel, host: String, port: Int) {
        self.channel = channel
        self.host = host
        self.port = port
    }

    /// Binds and starts serving. `port` 0 picks a free port (see `port`).
    public static func start(host: String, port: Int, responder: @escaping HTTPResponder) async throws -> HTTPServer {
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(RequestHandler(responder: responder))
                }
            }
        let channel = try await bootstrap.bind(host: host, port: port).get()
        return HTTPServer(channel: channel, host: host, port: channel.localAddress?.port ?? port)
    }

    public var baseURL: String { "http://\(host.contains(":") ? "[\(host)]" : host):\(port)" }

    public func shutdown() async {
        try? await channel.close()
    }
}

private final class RequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let responder: HTTPResponder
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var tooLarge = false
    private let connection = ClientConnection()

    init(responder: @escaping HTTPResponder) {
        self.responder = responder
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.close()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body = []
            tooLarge = false
        case .body(var chunk):
            if body.count + chunk.readableBytes > HTTPServer.maximumBodyBytes {
                tooLarge = true
            } else {
                body += chunk.readBytes(length: chunk.readableBytes) ?? []
            }
        case .end:
            guard let head else { return }
            self.head = nil
            respond(to: head, context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        let keepAlive = head.isKeepAlive
        let version = head.version
        let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        let promise = context.eventLoop.makePromise(of: HTTPResponse.self)
        if tooLarge {
            promise.succeed(.text(413, "request body too large\n"))
        } else {
            let request = Self.request(from: head, body: body, connection: connection)
            let responder = self.responder
            promise.completeWithTask { await responder(request) }
        }
        body = []
        promise.futureResult.whenSuccess { response in
            Self.write(response, version: version, keepAlive: keepAlive, context: boundContext.value)
        }
    }

    private static func request(from head: HTTPRequestHead, body: [UInt8], connection: ClientConnection) -> HTTPRequest {
        let parts = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var query: [String: String] = [:]
        if parts.count == 2 {
            for pair in parts[1].split(separator: "&") {
                let keyValue = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                query[String(keyValue[0])] = keyValue.count == 2 ? String(keyValue[1]) : ""
            }
        }
        return HTTPRequest(method: head.method.rawValue, path: String(parts.first ?? ""), query: query,
                           headers: head.headers.map { ($0.name, $0.value) }, body: body, connection: connection)
    }

    private static func write(_ response: HTTPResponse, version: HTTPVersion, keepAlive: Bool, context: ChannelHandlerContext) {
        var headers = HTTPHeaders(response.headers.map { ($0.name, $0.value) })
        headers.replaceOrAdd(name: "Content-Length", value: String(response.body.count))
        headers.replaceOrAdd(name: "Connection", value: keepAlive ? "keep-alive" : "close")
        let head = HTTPResponseHead(version: version, status: HTTPResponseStatus(statusCode: response.status), headers: headers)
        context.write(NIOAny(HTTPServerResponsePart.head(head)), promise: nil)
        if !response.body.isEmpty {
            context.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: response.body)))), promise: nil)
        }
        let done = context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil)))
        if !keepAlive {
            let channel = context.channel
            done.whenComplete { _ in channel.close(promise: nil) }
        }
    }
}
