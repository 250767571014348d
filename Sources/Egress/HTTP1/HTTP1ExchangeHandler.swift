import NIOCore

/// The client end of one HTTP/1.1 keep-alive connection, one request at a time. The relay's
/// requests are small and all alike, so the handler writes each as one buffer (head and
/// body, one system call) and reads answers with its own parser, without a codec's
/// pipeline stages. A request past its timeout, or cancelled, closes the connection, since
/// HTTP/1.1 cannot abandon a request and keep the connection.
///
/// Everything here runs on the connection's event loop.
final class HTTP1ExchangeHandler: ChannelInboundHandler, ExchangeHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

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
    private var parser = HTTP1ResponseParser()
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
        parser.reset()
        if timer == nil { armTimer(at: current!.deadline, on: context.eventLoop) }
        context.writeAndFlush(wrapOutboundOut(serialize(exchange.request, allocator: context.channel.allocator)), promise: nil)
    }

    /// No line break in what goes into the head: a token from an outside signer must never
    /// be able to add headers or a request.
    private static func fitsOnOneLine(_ request: EgressRequest) -> Bool {
        func plain(_ text: String?) -> Bool { text?.utf8.allSatisfy { $0 != 13 && $0 != 10 } ?? true }
        return plain(request.path) && plain(request.authorization) && plain(request.contentType) && plain(request.method)
    }

    /// Request line, headers and body in one buffer.
    private func serialize(_ request: EgressRequest, allocator: ByteBufferAllocator) -> ByteBuffer {
        let bodyBytes = request.body?.readableBytes ?? 0
        var buffer = allocator.buffer(capacity: 160 + request.path.utf8.count + (request.authorization?.utf8.count ?? 0) + bodyBytes)
        buffer.writeString(request.method)
        buffer.writeStaticString(" ")
        buffer.writeString(request.path)
        buffer.writeStaticString(" HTTP/1.1\r\nHost: ")
        buffer.writeString(authority)
        if let authorization = request.authorization {
            buffer.writeStaticString("\r\nAuthorization: ")
            buffer.writeString(authorization)
        }
        if let contentType = request.contentType {
            buffer.writeStaticString("\r\nContent-Type: ")
            buffer.writeString(contentType)
        }
        buffer.writeStaticString("\r\nContent-Length: ")
        buffer.writeString(String(bodyBytes))
        buffer.writeStaticString("\r\n\r\n")
        if var body = request.body { buffer.writeBuffer(&body) }
        return buffer
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
        var bytes = unwrapInboundIn(data)
        guard current != nil else {
            // Nothing was asked: the server is out of step, and the connection cannot be trusted.
            closeConnection()
            return
        }
        do {
            for event in try parser.feed(&bytes) { receive(event) }
        } catch {
            fail(ExchangeError.malformedResponse(error.reason))
        }
    }

    private func receive(_ event: HTTP1ResponseParser.Event) {
        guard let exchange = current?.exchange else { return }
        switch event {
        case .head(let status, let retryAfter, let keepAlive):
            _ = exchange.receivedStatus(status, retryAfter: retryAfter)
            current?.keepAlive = keepAlive
        case .body(var bytes):
            do {
                try exchange.receivedBody(&bytes)
            } catch {
                fail(error)
            }
        case .end(let leftover):
            if leftover { current?.keepAlive = false }
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

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(error)
        closeConnection()
    }

    func channelInactive(context: ChannelHandlerContext) {
        state.markUnusable()
        timer?.cancel()
        // An answer without a length or chunks ends with the connection.
        if current != nil, parser.endsWithConnection { answer() }
        fail(ExchangeError.connectionClosed)
        context.fireChannelInactive()
    }
}
