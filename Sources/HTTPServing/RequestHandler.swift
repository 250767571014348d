import NIOCore
import NIOHTTP1
import NIOHTTP2

/// Which protocol a request handler serves: an HTTP/1.1 connection, or one HTTP/2 stream.
enum ServedProtocol {
    case http1
    case http2(HTTP2ConnectionFaults)

    /// HTTP/1.1 decides keep-alive per request and says so in a `Connection` header;
    /// HTTP/2 forbids that header and a stream always ends with its response.
    var isHTTP1: Bool { if case .http1 = self { true } else { false } }
}

/// Reads one request at a time (HTTP/1.1 keep-alive, or one HTTP/2 stream through
/// `HTTP2FramePayloadToHTTP1ServerCodec`) and writes the responder's answer.
final class RequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let responder: HTTPResponder
    private let statistics: HTTPServerStatistics
    private let servedProtocol: ServedProtocol
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var tooLarge = false
    private let connection = ClientConnection()

    init(responder: @escaping HTTPResponder, statistics: HTTPServerStatistics, servedProtocol: ServedProtocol) {
        self.responder = responder
        self.statistics = statistics
        self.servedProtocol = servedProtocol
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if case .http2(let faults) = servedProtocol {
            faults.streamOpened(try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID))
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.close()
        if case .http2(let faults) = servedProtocol { faults.streamClosed() }
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
            switch servedProtocol {
            case .http1:
                statistics.count(\.http1Requests)
            case .http2(let faults):
                statistics.count(\.http2Requests)
                if faults.resetsThisRequest() {
                    // Closing a stream channel sends RST_STREAM; the request is not applied.
                    context.close(promise: nil)
                    return
                }
                faults.requestArrived()
            }
            respond(to: head, context: context)
        }
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        let isHTTP1 = servedProtocol.isHTTP1
        let keepAlive = !isHTTP1 || head.isKeepAlive
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
            Self.write(response, version: version, keepAlive: keepAlive, connectionHeader: isHTTP1,
                       context: boundContext.value)
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

    private static func write(_ response: HTTPResponse, version: HTTPVersion, keepAlive: Bool, connectionHeader: Bool,
                              context: ChannelHandlerContext) {
        var headers = HTTPHeaders(response.headers.map { ($0.name, $0.value) })
        headers.replaceOrAdd(name: "Content-Length", value: String(response.body.count))
        if connectionHeader { headers.replaceOrAdd(name: "Connection", value: keepAlive ? "keep-alive" : "close") }
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

/// The HTTP/2 faults of one connection. Every stream of a connection runs on the
/// connection's event loop, and this state is only touched there.
final class HTTP2ConnectionFaults: @unchecked Sendable {
    private let behaviour: HTTP2ServerBehaviour
    private let connection: any Channel
    private let statistics: HTTPServerStatistics
    private var requests = 0
    private var openStreams = 0
    private var highestStreamID = HTTP2StreamID.rootStream
    private var goingAway = false
    private var closeScheduled = false

    init(behaviour: HTTP2ServerBehaviour, connection: any Channel, statistics: HTTPServerStatistics) {
        self.behaviour = behaviour
        self.connection = connection
        self.statistics = statistics
    }

    func streamOpened(_ id: HTTP2StreamID?) {
        connection.eventLoop.preconditionInEventLoop()
        openStreams += 1
        statistics.noteOpenStreams(openStreams)
        if let id, id > highestStreamID { highestStreamID = id }
    }

    /// Once the last stream before the GOAWAY finished, the connection closes after a grace
    /// period (unless the client closed it first), as a front end does: closing at once would
    /// reset the TCP connection under streams the client sent meanwhile, and the client would
    /// lose the GOAWAY and the last answers with them.
    func streamClosed() {
        openStreams -= 1
        guard goingAway, openStreams == 0, !closeScheduled else { return }
        closeScheduled = true
        let connection = connection
        connection.eventLoop.scheduleTask(in: .seconds(1)) { connection.close(promise: nil) }
    }

    func resetsThisRequest() -> Bool {
        guard behaviour.resetShare > 0, Double.random(in: 0..<1) < behaviour.resetShare else { return false }
        statistics.count(\.streamsReset)
        return true
    }

    /// Every `goAwayEveryRequests`th request drains the connection: streams opened so far
    /// are answered, the client must open a new connection for anything after.
    func requestArrived() {
        requests += 1
        if let change = behaviour.streamLimitChange, requests == change.afterRequests {
            let settings = HTTP2Frame(streamID: .rootStream,
                                      payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: change.limit)])))
            connection.writeAndFlush(settings, promise: nil)
        }
        guard let every = behaviour.goAwayEveryRequests, requests % every == 0, !goingAway else { return }
        goingAway = true
        statistics.count(\.goAwaysSent)
        let frame = HTTP2Frame(streamID: .rootStream,
                               payload: .goAway(lastStreamID: highestStreamID, errorCode: .noError, opaqueData: nil))
        connection.writeAndFlush(frame, promise: nil)
    }
}
