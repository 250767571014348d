import NIOCore
import NIOHTTP1

/// The client end of one HTTP/1.1 keep-alive connection, one request at a time. Answers are
/// read by NIO's llhttp-based `HTTPResponseDecoder`, which is well kept and refuses what
/// RFC 9112 says must be refused (both `Transfer-Encoding` and `Content-Length`, bad chunk
/// framing, oversized heads); a request goes out as head and body in one flush. A request
/// past its timeout, or cancelled, closes the connection, since HTTP/1.1 cannot abandon a
/// request and keep the connection.
///
/// Everything here runs on the connection's event loop.
final class HTTP1ExchangeHandler: ChannelInboundHandler, ExchangeHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private struct Current {
        let exchange: Exchange
        let deadline: NIODeadline
        var keepAlive = true
    }

    private let authority: String
    private let requestTimeout: TimeAmount
    private let state: ConnectionState
    private var context: ChannelHandlerContext?
    private var current: Current?
    /// One timer per connection, re-armed for the request under way when it fires, instead
    /// of one scheduled and cancelled per request.
    private var timer: Scheduled<Void>?

    init(authority: String, requestTimeout: TimeAmount, state: ConnectionState) {
        self.authority = authority
        self.requestTimeout = requestTimeout
        self.state = state
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        self.context = nil
    }

    func start(_ exchange: Exchange, completion: Exchange.Completion) {
        guard !exchange.isCancelled else {
            completion.resume(throwing: CancellationError())
            return
        }
        guard let context, current == nil, context.channel.isActive else {
            completion.resume(throwing: ExchangeError.notSent)
            return
        }
        guard Self.fitsOnOneLine(exchange.request) else {
            completion.resume(throwing: ExchangeError.invalidRequest("a header value holds a line break"))
            return
        }
        exchange.completion = completion
        current = Current(exchange: exchange, deadline: .now() + requestTimeout)
        if timer == nil { armTimer(at: current!.deadline, on: context.eventLoop) }
        write(exchange.request, context: context)
    }

    /// No line break in what goes into the head: a token from an outside signer must never
    /// be able to add headers or a request.
    private static func fitsOnOneLine(_ request: EgressRequest) -> Bool {
        func plain(_ text: String?) -> Bool { text?.utf8.allSatisfy { $0 != 13 && $0 != 10 } ?? true }
        return plain(request.path) && plain(request.authorization) && plain(request.contentType) && plain(request.method)
            && request.otherHeaders.allSatisfy { plain($0.name) && plain($0.value) }
    }

    /// Head, body and end, flushed once: one write of the socket.
    private func write(_ request: EgressRequest, context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.reserveCapacity(4)
        headers.add(name: "Host", value: authority)
        if let authorization = request.authorization { headers.add(name: "Authorization", value: authorization) }
        if let contentType = request.contentType { headers.add(name: "Content-Type", value: contentType) }
        for header in request.otherHeaders { headers.add(name: header.name, value: header.value) }
        headers.add(name: "Content-Length", value: String(request.body?.readableBytes ?? 0))
        let head = HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: request.method), uri: request.path, headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if let body = request.body, body.readableBytes > 0 {
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    private func armTimer(at deadline: NIODeadline, on eventLoop: any EventLoop) {
        timer = eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            timer = nil
            guard let current else { return }
            if current.deadline <= .now() {
                fail(ExchangeError.timedOut(requestTimeout))
            } else {
                armTimer(at: current.deadline, on: eventLoop)
            }
        }
    }

    /// The caller's task was cancelled: the request ends now and the connection closes.
    func cancel(_ exchange: Exchange) {
        exchange.isCancelled = true
        guard current?.exchange === exchange else { return }
        fail(CancellationError())
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let exchange = current?.exchange else { return }  // the decoder refuses unsolicited answers
        switch unwrapInboundIn(data) {
        case .head(let head):
            _ = exchange.receivedStatus(Int(head.status.code), retryAfter: head.headers.first(name: "retry-after"))
            current?.keepAlive = head.isKeepAlive
        case .body(var bytes):
            do {
                try exchange.receivedBody(&bytes)
            } catch {
                fail(error)
            }
        case .end:
            answer()
        }
    }

    private func answer() {
        guard let finished = current else { return }
        current = nil
        if !finished.keepAlive { closeConnection() }
        finished.exchange.completion?.resume(with: Result { try finished.exchange.response() })
    }

    /// Ends the request under way with `error` and closes the connection: what is left of
    /// its answer would otherwise be read as the next request's.
    private func fail(_ error: any Error) {
        guard let failed = current else { return }
        current = nil
        closeConnection()
        failed.exchange.completion?.resume(throwing: error)
    }

    private func closeConnection() {
        state.markUnusable()
        context?.close(promise: nil)
    }

    /// The decoder's errors say the answer broke HTTP/1.1; anything else is the connection's.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch error {
        case let parserError as HTTPParserError: fail(ExchangeError.malformedResponse("\(parserError)"))
        case let decoderError as NIOHTTPDecoderError: fail(ExchangeError.malformedResponse("\(decoderError)"))
        default: fail(error)
        }
        closeConnection()
    }

    /// An answer without a length or chunks ends with the connection: the decoder has already
    /// ended it; a request still under way fails.
    func channelInactive(context: ChannelHandlerContext) {
        state.markUnusable()
        timer?.cancel()
        fail(ExchangeError.connectionClosed)
        context.fireChannelInactive()
    }
}
