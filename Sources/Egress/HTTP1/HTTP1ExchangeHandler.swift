import NIOCore
import NIOHTTP1

/// The client end of one HTTP/1.1 keep-alive connection, one request at a time: the head,
/// body and end of a request leave in one flush (one system call), the answer is collected
/// whole. A request past its timeout, or cancelled, closes the connection, since HTTP/1.1
/// cannot abandon a request and keep the connection.
///
/// Everything here runs on the connection's event loop.
final class HTTP1ExchangeHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    typealias Completion = CheckedContinuation<EgressResponse, any Error>

    private struct Current {
        let exchange: HTTP1Exchange
        let completion: Completion
        var timeout: Scheduled<Void>?
        var status: Int?
        var retryAfter: String?
        var keepAlive = true
        var body: ByteBuffer?
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

    func start(_ exchange: HTTP1Exchange, completion: Completion) {
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
        current = Current(exchange: exchange, completion: completion, timeout: timeout)

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
    func cancel(_ exchange: HTTP1Exchange) {
        exchange.isCancelled = true
        guard current?.exchange === exchange else { return }
        fail(CancellationError())
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard current != nil else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            // An informational answer (100 Continue) precedes the real one.
            guard head.status.code >= 200 else { return }
            current!.status = Int(head.status.code)
            current!.retryAfter = head.headers.first(name: "Retry-After")
            current!.keepAlive = head.isKeepAlive
        case .body(var bytes):
            if current!.body == nil {
                current!.body = bytes
            } else {
                current!.body!.writeBuffer(&bytes)
            }
            if current!.body!.readableBytes > HTTP2StreamsHandler.maximumBodyBytes {
                fail(ExchangeError.responseTooLarge(HTTP2StreamsHandler.maximumBodyBytes))
            }
        case .end:
            answer()
        }
    }

    private func answer() {
        guard let finished = current else { return }
        current = nil
        finished.timeout?.cancel()
        guard let status = finished.status else {
            finished.completion.resume(throwing: ExchangeError.malformedResponse("no status line"))
            closeConnection()
            return
        }
        if !finished.keepAlive { closeConnection() }
        finished.completion.resume(returning: EgressResponse(status: status, retryAfter: finished.retryAfter,
                                                             body: finished.body ?? ByteBuffer()))
    }

    /// Ends the request under way with `error` and closes the connection: what is left of
    /// its answer would otherwise be read as the next request's.
    private func fail(_ error: any Error) {
        guard let failed = current else { return }
        current = nil
        failed.timeout?.cancel()
        closeConnection()
        failed.completion.resume(throwing: error)
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

/// One request on an HTTP/1.1 connection. Created by the caller's task, then touched
/// only on the connection's event loop.
final class HTTP1Exchange: @unchecked Sendable {
    let request: EgressRequest
    var isCancelled = false

    init(_ request: EgressRequest) {
        self.request = request
    }
}
