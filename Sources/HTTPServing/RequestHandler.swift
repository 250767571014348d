import NIOCore
import NIOHTTP1
import NIOHTTP2

/// Which protocol a request handler serves: an HTTP/1.1 connection, or one HTTP/2 stream.
enum ServedProtocol {
    case http1
    case http2((any HTTP2ConnectionObserver)?)

    /// HTTP/1.1 decides keep-alive per request and says so in a `Connection` header;
    /// HTTP/2 forbids that header and a stream always ends with its response.
    var isHTTP1: Bool { if case .http1 = self { true } else { false } }
}

/// Reads one request at a time (HTTP/1.1 keep-alive, or one HTTP/2 stream through
/// `HTTP2FramePayloadToHTTP1ServerCodec`) and writes the responder's answer.
final class RequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let responder: HTTPResponders
    private let statistics: HTTPServerStatistics
    private let servedProtocol: ServedProtocol
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var tooLarge = false
    private let connection = ClientConnection()

    init(responder: HTTPResponders, statistics: HTTPServerStatistics, servedProtocol: ServedProtocol) {
        self.responder = responder
        self.statistics = statistics
        self.servedProtocol = servedProtocol
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if case .http2(let observer?) = servedProtocol { observer.streamOpened(Self.streamID(of: context)) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.close()
        if case .http2(let observer?) = servedProtocol { observer.streamClosed(Self.streamID(of: context)) }
        context.fireChannelInactive()
    }

    private static func streamID(of context: ChannelHandlerContext) -> HTTP2StreamID? {
        try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID)
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
            case .http2(let observer):
                statistics.count(\.http2Requests)
                let arrived = observer.map { $0.requestArrived(Self.request(from: head, body: body, connection: connection),
                                                               on: Self.streamID(of: context)) }
                switch arrived ?? .answer {
                case .answer: break
                case .reset:
                    // Closing a stream channel sends RST_STREAM; the request is not applied.
                    context.close(promise: nil)
                    return
                case .refuse:
                    refuse(context: context)
                    return
                case .withhold:
                    return
                }
            }
            respond(to: head, context: context)
        }
    }

    /// RST_STREAM(REFUSED_STREAM), written below the HTTP/1 codec (which only takes response parts).
    private func refuse(context: ChannelHandlerContext) {
        guard let codec = try? context.pipeline.syncOperations.context(handlerType: HTTP2FramePayloadToHTTP1ServerCodec.self) else {
            context.close(promise: nil)
            return
        }
        codec.writeAndFlush(NIOAny(HTTP2Frame.FramePayload.rstStream(.refusedStream)), promise: nil)
    }

    private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
        let isHTTP1 = servedProtocol.isHTTP1
        let keepAlive = !isHTTP1 || head.isKeepAlive
        let version = head.version
        if tooLarge {
            body = []
            return Self.write(.text(413, "request body too large\n"), version: version, keepAlive: keepAlive,
                              connectionHeader: isHTTP1, context: context)
        }
        let request = Self.request(from: head, body: body, connection: connection)
        body = []
        if let response = responder.atOnce?(request) {
            return Self.write(response, version: version, keepAlive: keepAlive, connectionHeader: isHTTP1, context: context)
        }
        let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        let promise = context.eventLoop.makePromise(of: HTTPResponse.self)
        let responder = self.responder.inTask
        // One task per request bridges the event loop to the async responder. It is not
        // cancelled when the client goes away: a real server may still apply an update whose
        // client left, and the emulator shows that (responders that care watch
        // `request.connection`). Each task ends with its responder, which has no unbounded wait.
        promise.completeWithTask { await responder(request) }
        promise.futureResult.whenSuccess { response in
            Self.write(response, version: version, keepAlive: keepAlive, connectionHeader: isHTTP1,
                       context: boundContext.value)
        }
    }

    /// Split as UTF-8 bytes, not characters: this runs for every request a benchmark sends.
    private static func request(from head: HTTPRequestHead, body: [UInt8], connection: ClientConnection) -> HTTPRequest {
        let uri = head.uri.utf8
        let queryStart = uri.firstIndex(of: UInt8(ascii: "?"))
        var query: [String: String] = [:]
        if let queryStart {
            for pair in uri[uri.index(after: queryStart)...].split(separator: UInt8(ascii: "&")) {
                let keyValue = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
                query[String(Substring(keyValue[0]))] = keyValue.count == 2 ? String(Substring(keyValue[1])) : ""
            }
        }
        return HTTPRequest(method: head.method.rawValue, path: String(Substring(uri[..<(queryStart ?? uri.endIndex)])), query: query,
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
        let trailers = connectionHeader ? nil : response.trailers.map { HTTPHeaders($0.map { ($0.name, $0.value) }) }
        let done = context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(trailers)))
        if !keepAlive {
            let channel = context.channel
            done.whenComplete { _ in channel.close(promise: nil) }
        }
    }
}

/// Watches the streams of one HTTP/2 connection, on its event loop: what a server that
/// injects connection faults (the emulator) hooks into. Nothing in production sets one.
public protocol HTTP2ConnectionObserver: AnyObject, Sendable {
    func streamOpened(_ id: HTTP2StreamID?)
    func streamClosed(_ id: HTTP2StreamID?)
    /// A request arrived whole on a stream: answer it, or leave it unprocessed one of the ways
    /// a server may.
    func requestArrived(_ request: HTTPRequest, on id: HTTP2StreamID?) -> HTTP2RequestFate
}

public enum HTTP2RequestFate: Sendable {
    case answer
    /// RST_STREAM(CANCEL): the client cannot tell whether anything was applied.
    case reset
    /// RST_STREAM(REFUSED_STREAM): certainly not processed.
    case refuse
    /// No answer: the stream is above a GOAWAY's last stream ID.
    case withhold
}

/// Writes HTTP/2 frames beneath SwiftNIO's connection state machine, which never learns of
/// them. A server injecting faults sends its GOAWAY this way and goes on reading the streams
/// the client opened before the GOAWAY reached it, to count them: SwiftNIO would refuse them,
/// and then end the whole connection on their DATA frames.
public final class FramesBeneathHTTP2: ChannelOutboundHandler {
    public typealias OutboundIn = ByteBuffer
    private var context: ChannelHandlerContext?

    public func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    public func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    /// GOAWAY (RFC 9113 §6.8) naming `lastStreamID`, with NO_ERROR.
    public func writeGoAway(lastStreamID: HTTP2StreamID) {
        guard let context else { return }
        var frame = context.channel.allocator.buffer(capacity: 17)
        frame.writeInteger(UInt32(8) << 8 | 0x7)  // a payload of 8 bytes, type GOAWAY
        frame.writeInteger(UInt8(0))  // no flags
        frame.writeInteger(UInt32(0))  // the connection's stream
        frame.writeInteger(UInt32(Int32(lastStreamID)))
        frame.writeInteger(UInt32(0))  // NO_ERROR
        context.writeAndFlush(NIOAny(frame), promise: nil)
    }

    /// An answer whose header block is malformed (RFC 9113 §8.2.1: an upper-case field name),
    /// ending the stream: `:status` 200 and `Content-Type`, both without touching HPACK's
    /// dynamic table, so the connection's compression state stays whole.
    public func writeMalformedAnswer(on streamID: HTTP2StreamID) {
        guard let context else { return }
        let (name, value) = (Array("Content-Type".utf8), Array("application/json".utf8))
        // :status 200 from the static table, then a field not indexed, its name a literal too.
        let block: [UInt8] = [0x88, 0x00, UInt8(name.count)] + name + [UInt8(value.count)] + value
        var frame = context.channel.allocator.buffer(capacity: 9 + block.count)
        frame.writeInteger(UInt32(block.count) << 8 | 0x1)  // type HEADERS
        frame.writeInteger(UInt8(0x1 | 0x4))  // END_STREAM, END_HEADERS
        frame.writeInteger(UInt32(Int32(streamID)))
        frame.writeBytes(block)
        context.writeAndFlush(NIOAny(frame), promise: nil)
    }
}
