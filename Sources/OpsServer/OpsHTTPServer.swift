import NIOCore
import NIOHTTP1
import NIOPosix

/// What the ops endpoint answers: a status, a content type and a body.
public struct OpsResponse: Sendable {
    public var status: Int
    public var contentType: String
    public var body: [UInt8]

    public init(status: Int, contentType: String, body: [UInt8]) {
        self.status = status
        self.contentType = contentType
        self.body = body
    }

    static func text(_ status: Int, _ text: String) -> OpsResponse {
        OpsResponse(status: status, contentType: "text/plain; charset=utf-8", body: Array(text.utf8))
    }

    static func json(_ status: Int, _ json: String) -> OpsResponse {
        OpsResponse(status: status, contentType: "application/json", body: Array(json.utf8))
    }
}

/// The ops endpoint's own server: plain HTTP/1.1 with keep-alive, for scrapes and probes.
/// It reads a request's head, discards a body (no route takes one; one over 64 KiB closes the
/// connection), and answers through one async responder.
final class OpsHTTPServer: Sendable {
    typealias Responder = @Sendable (_ method: String, _ path: String) async -> OpsResponse

    private let channel: any Channel
    let port: Int

    private init(channel: any Channel, port: Int) {
        self.channel = channel
        self.port = port
    }

    /// Binds now: a port in use fails here.
    static func start(host: String, port: Int, responder: @escaping Responder) async throws -> OpsHTTPServer {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(OpsRequestHandler(responder: responder))
                }
            }
            .bind(host: host, port: port).get()
        return OpsHTTPServer(channel: channel, port: channel.localAddress?.port ?? port)
    }

    func shutdown() async {
        try? await channel.close()
    }
}

/// One connection's requests, one at a time (`HTTPServerPipelineHandler` holds pipelined ones
/// back until the answer before them is written).
final class OpsRequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    static let maximumBodyBytes = 1 << 16

    private let responder: OpsHTTPServer.Responder
    private var head: HTTPRequestHead?
    private var bodyBytes = 0

    init(responder: @escaping OpsHTTPServer.Responder) {
        self.responder = responder
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            bodyBytes = 0
        case .body(let bytes):
            bodyBytes += bytes.readableBytes
            if bodyBytes > Self.maximumBodyBytes { context.close(promise: nil) }
        case .end:
            guard let head else { return }
            self.head = nil
            answer(head, context: context)
        }
    }

    /// Bytes that are not HTTP/1.1 were answered 400 by NIO's error handler; the connection has
    /// nothing more to say (NIO leaves it open).
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func answer(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = String(head.uri.prefix { $0 != "?" })
        let method = head.method.rawValue
        let answered = context.eventLoop.makePromise(of: OpsResponse.self)
        answered.completeWithTask { [responder] in await responder(method, path) }
        answered.futureResult.assumeIsolated().whenSuccess { [self] response in
            write(response, for: head, context: context)
        }
    }

    private func write(_ response: OpsResponse, for request: HTTPRequestHead, context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: response.contentType)
        headers.add(name: "Content-Length", value: String(response.body.count))
        if !request.isKeepAlive { headers.add(name: "Connection", value: "close") }
        let head = HTTPResponseHead(version: request.version, status: HTTPResponseStatus(statusCode: response.status), headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if request.method != .HEAD {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))), promise: nil)
        }
        let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if !request.isKeepAlive { written.assumeIsolated().whenComplete { _ in context.close(promise: nil) } }
    }
}
