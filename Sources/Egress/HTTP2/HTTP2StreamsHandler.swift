import NIOCore
import NIOHPACK
import NIOHTTP2

/// The client end of one HTTP/2 connection, on the frames `NIOHTTP2Handler` produces:
/// each request is a stream this handler numbers itself, its HEADERS and DATA written
/// together, and the writes of everything started in one event-loop turn go out in one
/// flush. No per-stream channel or pipeline is built; a request is a dictionary entry.
///
/// `HTTP2StreamsStateMachine` decides (stream IDs, timeouts, GOAWAY, PINGs, idling, the
/// connection window); this handler writes frames, runs timers and completes requests as
/// it says. The stream limit of the server's SETTINGS goes to the pool (which opens
/// connections from the streams actually allowed) whenever the server announces it, and
/// `NIOHTTP2Handler` holds streams beyond it until one ends.
///
/// Everything here runs on the connection's event loop.
final class HTTP2StreamsHandler: ChannelInboundHandler, ExchangeHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// The per-stream window granted in SETTINGS covers the largest answer accepted, so
    /// stream windows never need updating.
    static let initialSettings: HTTP2Settings = [
        HTTP2Setting(parameter: .enablePush, value: 0),
        HTTP2Setting(parameter: .initialWindowSize, value: Exchange.maximumBodyBytes),
        HTTP2Setting(parameter: .maxHeaderListSize, value: 1 << 16),
    ]
    private static let defaultConnectionWindow = 65_535

    private let authority: String
    /// Mirrors for the pool, on other threads, what the state machine decided.
    private let state: ConnectionState
    private var machine: HTTP2StreamsStateMachine<Exchange>
    private var context: ChannelHandlerContext?
    private var flushScheduled = false
    private var deadlineTimer: Scheduled<Void>?
    private var livenessTimer: Scheduled<Void>?
    /// The timer that closes the connection unless the server answers the PING sent.
    private var pingTimer: Scheduled<Void>?

    init(authority: String, requestTimeout: TimeAmount, liveness: HTTP2Liveness, state: ConnectionState) {
        self.authority = authority
        self.state = state
        self.machine = HTTP2StreamsStateMachine(requestTimeout: requestTimeout, liveness: liveness, now: .now())
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // The default 64 KiB connection window would let only that many bytes of answers
        // be in flight across all streams before the server waits for an update.
        let raise = HTTP2Frame(streamID: .rootStream,
                               payload: .windowUpdate(windowSizeIncrement: HTTP2StreamsStateMachine<Exchange>.connectionWindow
                                   - Self.defaultConnectionWindow))
        context.writeAndFlush(wrapOutboundOut(raise), promise: nil)
        armLivenessTimer(at: machine.firstLivenessCheck, on: context.eventLoop)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelTimers()
        self.context = nil
    }

    // MARK: Requests

    func start(_ exchange: Exchange, completion: Exchange.Completion) {
        guard !exchange.isCancelled else {
            completion.resume(throwing: CancellationError())
            return
        }
        guard let context else {
            completion.resume(throwing: ExchangeError.notSent)
            return
        }
        let streamID: HTTP2StreamID
        switch machine.start(exchange, now: .now()) {
        case .refuse(let error):
            completion.resume(throwing: error)
            return
        case .open(let opened, let firstDeadline):
            streamID = opened
            if let firstDeadline { armDeadlineTimer(at: firstDeadline, on: context.eventLoop) }
        }
        publishUsability()
        exchange.completion = completion
        exchange.streamID = streamID

        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.assumeIsolated().whenFailure { [self] error in
            fail(streamID, error)
        }
        let request = exchange.request
        let headers = Self.headers(for: request, authority: authority)
        if let body = request.body {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers)))), promise: nil)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true)))),
                          promise: written)
        } else {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: true)))),
                          promise: written)
        }
        scheduleFlush(on: context)
    }

    /// The caller's task was cancelled: the request ends now with `CancellationError` and
    /// its stream is reset, so that the server stops working on it.
    func cancel(_ exchange: Exchange) {
        exchange.isCancelled = true
        guard let streamID = exchange.streamID, machine[streamID] === exchange else { return }
        fail(streamID, CancellationError())
        if let context { reset(streamID, context: context) }
    }

    /// Values that repeat on every request (method, authority, content type) enter HPACK's
    /// table and go out as one byte each afterwards. The path (one per vehicle), the length
    /// and the token are sent as literals that never enter it: they would only evict each
    /// other at the cost of a table search and an insertion per request.
    static func headers(for request: EgressRequest, authority: String) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(7 + request.otherHeaders.count)
        headers.add(name: ":method", value: request.method)
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: authority)
        headers.add(name: ":path", value: request.path, indexing: .nonIndexable)
        if let authorization = request.authorization {
            headers.add(name: "authorization", value: authorization, indexing: .neverIndexed)
        }
        if let contentType = request.contentType { headers.add(name: "content-type", value: contentType) }
        for header in request.otherHeaders { headers.add(name: header.name, value: header.value) }
        if let body = request.body { headers.add(name: "content-length", value: String(body.readableBytes), indexing: .nonIndexable) }
        return headers
    }

    /// Writes started in this event-loop turn leave in one flush: one TLS record and one
    /// system call for a burst of requests instead of one per frame.
    private func scheduleFlush(on context: ChannelHandlerContext) {
        guard !flushScheduled else { return }
        flushScheduled = true
        context.eventLoop.assumeIsolated().execute { [self] in
            flushScheduled = false
            self.context?.flush()
        }
    }

    // MARK: Answers

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if machine.heardFrame(now: .now()) {
            pingTimer?.cancel()
            pingTimer = nil
        }
        switch frame.payload {
        case .headers(let headers):
            received(headers, on: frame.streamID)
        case .data(let data):
            received(data, on: frame.streamID, context: context)
        case .rstStream(let code):
            fail(frame.streamID, ExchangeError.streamReset(code))
        case .goAway:
            // Streams above the last one the server processed are closed by NIOHTTP2Handler
            // (StreamClosedEvent below); the others are answered before the server closes.
            let drained = machine.receivedGoAway()
            publishUsability()
            if drained { close(context) }
        case .settings(.settings(let settings)):
            // Announced at the start and whenever the server changes its mind.
            if let limit = settings.last(where: { $0.parameter == .maxConcurrentStreams }) {
                state.announceStreamLimit(limit.value)
            }
        default:
            break
        }
    }

    private func received(_ headers: HTTP2Frame.FramePayload.Headers, on streamID: HTTP2StreamID) {
        guard let stream = machine[streamID] else { return }
        if stream.status == nil {
            guard let status = headers.headers.first(name: ":status").flatMap({ Int($0) }) else {
                fail(streamID, ExchangeError.malformedResponse("no :status"))
                return
            }
            // An informational answer (100 Continue) precedes the real one.
            let retryAfter = stream.isGRPC ? nil : headers.headers.first(name: "retry-after")
            guard stream.receivedStatus(status, retryAfter: retryAfter) else { return }
        }
        // gRPC's status comes in the trailers, or with the headers of a trailers-only answer.
        if stream.isGRPC, let grpcStatus = headers.headers.first(name: "grpc-status") {
            stream.receivedGRPCStatus(GRPCStatusFields(status: grpcStatus, message: headers.headers.first(name: "grpc-message"),
                                                       detailsBase64: headers.headers.first(name: "grpc-status-details-bin")))
        }
        if headers.endStream { answer(streamID) }
    }

    private func received(_ data: HTTP2Frame.FramePayload.Data, on streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard case .byteBuffer(var bytes) = data.data else { return }
        if let increment = machine.consumed(bytes: bytes.readableBytes + (data.paddingBytes.map { $0 + 1 } ?? 0)) {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: increment))),
                          promise: nil)
            scheduleFlush(on: context)
        }
        guard let stream = machine[streamID] else { return }
        do {
            try stream.receivedBody(&bytes)
        } catch {
            fail(streamID, error)
            reset(streamID, context: context)
            return
        }
        if data.endStream { answer(streamID) }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent, machine[closed.streamID] != nil {
            fail(closed.streamID, machine.closedStreamError(reason: closed.reason))
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            fail(streamError.streamID, streamError.baseError)
            return
        }
        machine.failed(error)
        publishUsability()
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        let (error, unanswered) = machine.closed()
        publishUsability()
        cancelTimers()
        for stream in unanswered { stream.completion?.resume(throwing: error) }
        context.fireChannelInactive()
    }

    /// Completes a stream with its answer.
    private func answer(_ streamID: HTTP2StreamID) {
        guard let (stream, closeConnection) = machine.end(streamID, now: .now()) else { return }
        stream.completion?.resume(with: Result { try stream.response() })
        if closeConnection, let context { close(context) }
    }

    /// Completes a stream with why it has no answer; a stream already completed stays so.
    private func fail(_ streamID: HTTP2StreamID, _ error: any Error) {
        guard let (stream, closeConnection) = machine.end(streamID, now: .now()) else { return }
        stream.completion?.resume(throwing: error)
        if closeConnection, let context { close(context) }
    }

    /// The pool starts no request on a connection the machine stopped taking them.
    private func publishUsability() {
        if machine.isGoingAway { state.markUnusable() }
    }

    private func close(_ context: ChannelHandlerContext) {
        if context.channel.isActive { context.close(promise: nil) }
    }

    private func reset(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))), promise: nil)
        scheduleFlush(on: context)
    }

    // MARK: Timers

    private func armDeadlineTimer(at deadline: NIODeadline, on eventLoop: any EventLoop) {
        deadlineTimer = eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            deadlineTimer = nil
            let (expired, next) = machine.expireDeadlines(now: .now())
            for (streamID, stream) in expired {
                // Failed before the reset, whose stream-closed event would name a reset instead.
                stream.completion?.resume(throwing: ExchangeError.timedOut(machine.requestTimeout))
                if let context { reset(streamID, context: context) }
            }
            if machine.shouldCloseNow, let context { close(context) }
            if let next { armDeadlineTimer(at: next, on: eventLoop) }
        }
    }

    private func armLivenessTimer(at deadline: NIODeadline, on eventLoop: any EventLoop) {
        livenessTimer = eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            livenessTimer = nil
            guard let context, context.channel.isActive else { return }
            switch machine.checkLiveness(now: .now()) {
            case .close:
                publishUsability()
                context.close(promise: nil)
            case .checkAgain(let next, let ping):
                if let ping { send(ping, context: context) }
                armLivenessTimer(at: next, on: eventLoop)
            }
        }
    }

    private func send(_ ping: HTTP2PingData, context: ChannelHandlerContext) {
        pingTimer = context.eventLoop.assumeIsolated().scheduleTask(in: machine.liveness.pingTimeout) { [self] in
            pingTimer = nil
            // Its streams fail now, as a closed connection's do, with why.
            machine.pingTimedOut()
            publishUsability()
            self.context?.close(promise: nil)
        }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(ping, ack: false))), promise: nil)
        scheduleFlush(on: context)
    }

    private func cancelTimers() {
        for timer in [deadlineTimer, livenessTimer, pingTimer] { timer?.cancel() }
        deadlineTimer = nil
        livenessTimer = nil
        pingTimer = nil
    }
}
