import NIOCore
import NIOHTTP1

/// The client end of one HTTP/1.1 keep-alive connection, one request at a time: the head,
/// body and end of a request leave in one flush (one system call), the answer is collected
/// whole. A request past its timeout, or cancelled, closes the connection, since HTTP/1.1
/// cannot abandon a request and keep the connection.
///
/// Everything here runs on the connection's event loop.
final class HTTP1ExchangeHandler: ChannelInboundHandler, ExchangeHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private struct Current {
        let exchange: Exchange
        let timeout: Scheduled<Void>
        var keepAlive = true
    }

    private let authority: String
    private let requestTimeout: TimeAmount
    private let state: ConnectionState
    private var context: ChannelHandlerContext?
    private var current: Current?

    init(authority: String, requestTimeout: TimeAmount, state: ConnectionState) {
        self.authority = authority
        self.requestTimeout = requestTimeout
        self.state = state
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
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
        let timeout = context.eventLoop.assumeIsolated().scheduleTask(in: requestTimeout) { [self] in
            fail(ExchangeError.timedOut(requestTimeout))
        }
        exchange.completion = completion
        current = Current(exchange: exchange, timeout: timeout)

        let request = exchange.request
        var headers = HTTPHeaders()
        headers.reserveCapacity(5)
        headers.add(name: "Host", value: authority)
        if let authorization = request.authorization { headers.add(name: "Authorization", value: authorization) }
        if let contentType = request.contentType { headers.add(name: "Content-Type", value: contentType) }
        headers.add(name: "Content-Length", value: String(request.body?.readableBytes ?? 0))
        let head = HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: request.method), uri: request.path, headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if let body = request.body { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    /// The caller's task was cancelled: the request ends now and the connection closes.
    func cancel(_ exchange: Exchange) {
        exchange.isCancelled = true
        guard current?.exchange === exchange else { return }
        fail(CancellationError())
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let exchange = current?.exchange else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            // An informational answer (100 Continue) precedes the real one.
            if exchange.receivedStatus(Int(head.status.code), retryAfter: head.headers.first(name: "Retry-After")) {
                current?.keepAlive = head.isKeepAlive
            }
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
        finished.timeout.cancel()
        // Without a status line the stream is not understood; what follows cannot be trusted.
        if !finished.keepAlive || finished.exchange.status == nil { closeConnection() }
        finished.exchange.completion?.resume(with: Result { try finished.exchange.response() })
    }

    /// Ends the request under way with `error` and closes the connection: what is left of
    /// its answer would otherwise be read as the next request's.
    private func fail(_ error: any Error) {
        guard let failed = current else { return }
        current = nil
        failed.timeout.cancel()
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
        fail(ExchangeError.connectionClosed)
        context.fireChannelInactive()
    }
}
