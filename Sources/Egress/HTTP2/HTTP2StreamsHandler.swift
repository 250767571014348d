import NIOCore
import NIOHPACK
import NIOHTTP2

/// The client end of one HTTP/2 connection, on the frames `NIOHTTP2Handler` produces:
/// each request is a stream this handler numbers itself, its HEADERS and DATA written
/// together, and the writes of everything started in one event-loop turn go out in one
/// flush. No per-stream channel or pipeline is built; a request is a dictionary entry.
///
/// It follows the server: the stream limit of its SETTINGS goes to the pool (which opens
/// connections from the streams actually allowed) whenever the server announces it, and
/// `NIOHTTP2Handler` holds streams beyond it until one ends. It watches the connection: a
/// silent server is sent a PING, and a connection whose PING goes unanswered, or that carried
/// no stream for the idle timeout, is closed (`HTTP2Liveness`).
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
    /// The connection window, raised once at the start and topped up as answers are read.
    private static let connectionWindow = 1 << 24
    private static let defaultConnectionWindow = 65_535

    private let authority: String
    private let requestTimeout: TimeAmount
    private let liveness: HTTP2Liveness
    private let state: ConnectionState
    private var context: ChannelHandlerContext?
    private var streams: [HTTP2StreamID: Exchange] = [:]
    private var nextStreamNumber: Int32 = 1
    private var goingAway = false
    private var closeError: (any Error)?
    private var flushScheduled = false
    private var bytesToReturn = 0
    /// Every stream's deadline, in the order the streams started. One timeout for all
    /// requests keeps this sorted, so one timer at the head serves every stream.
    private var deadlines = CircularBuffer<(stream: HTTP2StreamID, deadline: NIODeadline)>(initialCapacity: 64)
    private var deadlineTimer: Scheduled<Void>?
    /// When the server last sent a frame, and when the last stream ended (or the connection began).
    private var lastHeard = NIODeadline.now()
    private var idleSince: NIODeadline? = .now()
    /// The timer that closes the connection unless the server answers the PING sent.
    private var pingAwaited: Scheduled<Void>?
    private var pingsSent: UInt64 = 0
    private var livenessTimer: Scheduled<Void>?

    init(authority: String, requestTimeout: TimeAmount, liveness: HTTP2Liveness, state: ConnectionState) {
        self.authority = authority
        self.requestTimeout = requestTimeout
        self.liveness = liveness
        self.state = state
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // The default 64 KiB connection window would let only that many bytes of answers
        // be in flight across all streams before the server waits for an update.
        let raise = HTTP2Frame(streamID: .rootStream,
                               payload: .windowUpdate(windowSizeIncrement: Self.connectionWindow - Self.defaultConnectionWindow))
        context.writeAndFlush(wrapOutboundOut(raise), promise: nil)
        armLivenessTimer(at: .now() + min(liveness.pingAfterSilence, liveness.idleTimeout), on: context.eventLoop)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopWatching()
        self.context = nil
    }

    // MARK: Requests

    func start(_ exchange: Exchange, completion: Exchange.Completion) {
        guard !exchange.isCancelled else {
            completion.resume(throwing: CancellationError())
            return
        }
        guard let context, !goingAway, closeError == nil, state.isUsable else {
            completion.resume(throwing: ExchangeError.notSent)
            return
        }
        let streamID = HTTP2StreamID(nextStreamNumber)
        nextStreamNumber += 2
        if nextStreamNumber > Int32.max - 2 { stopAcceptingStreams() }

        exchange.completion = completion
        exchange.streamID = streamID
        streams[streamID] = exchange
        idleSince = nil
        trackDeadline(of: streamID, on: context.eventLoop)

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
        guard let streamID = exchange.streamID, streams[streamID] === exchange else { return }
        fail(streamID, CancellationError())
        if let context { reset(streamID, context: context) }
    }

    static func headers(for request: EgressRequest, authority: String) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(7 + request.otherHeaders.count)
        headers.add(name: ":method", value: request.method)
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: authority)
        headers.add(name: ":path", value: request.path)
        if let authorization = request.authorization {
            headers.add(name: "authorization", value: authorization, indexing: .neverIndexed)
        }
        if let contentType = request.contentType { headers.add(name: "content-type", value: contentType) }
        for header in request.otherHeaders { headers.add(name: header.name, value: header.value) }
        if let body = request.body { headers.add(name: "content-length", value: String(body.readableBytes)) }
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
        // Any frame shows the path alive, the answer to a PING or not.
        lastHeard = .now()
        if let awaited = pingAwaited {
            awaited.cancel()
            pingAwaited = nil
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
            stopAcceptingStreams()
            closeIfDrained(context: context)
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
        guard let stream = streams[streamID] else { return }
        if stream.status == nil {
            guard let status = headers.headers.first(name: ":status").flatMap({ Int($0) }) else {
                fail(streamID, ExchangeError.malformedResponse("no :status"))
                return
            }
            // An informational answer (100 Continue) precedes the real one.
            guard stream.receivedStatus(status, retryAfter: headers.headers.first(name: "retry-after")) else { return }
        }
        // gRPC's status comes in the trailers, or with the headers of a trailers-only answer.
        if let grpcStatus = headers.headers.first(name: "grpc-status") {
            stream.receivedGRPCStatus(GRPCStatusFields(status: grpcStatus, message: headers.headers.first(name: "grpc-message"),
                                                       detailsBase64: headers.headers.first(name: "grpc-status-details-bin")))
        }
        if headers.endStream { answer(streamID) }
    }

    private func received(_ data: HTTP2Frame.FramePayload.Data, on streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard case .byteBuffer(var bytes) = data.data else { return }
        returnToWindow(bytes.readableBytes + (data.paddingBytes.map { $0 + 1 } ?? 0), context: context)
        guard let stream = streams[streamID] else { return }
        do {
            try stream.receivedBody(&bytes)
        } catch {
            fail(streamID, error)
            reset(streamID, context: context)
            return
        }
        if data.endStream { answer(streamID) }
    }

    /// The answers read give their bytes back to the connection window (the multiplexer
    /// would do this; without one it is this handler's job).
    private func returnToWindow(_ bytes: Int, context: ChannelHandlerContext) {
        bytesToReturn += bytes
        guard bytesToReturn >= Self.connectionWindow / 4 else { return }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: bytesToReturn))),
                      promise: nil)
        bytesToReturn = 0
        scheduleFlush(on: context)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent, streams[closed.streamID] != nil {
            let error: ExchangeError = goingAway && closed.reason == .cancel
                ? .refusedByGoAway : .streamReset(closed.reason ?? .noError)
            fail(closed.streamID, error)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            fail(streamError.streamID, streamError.baseError)
            return
        }
        closeError = closeError ?? error
        stopAcceptingStreams()
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        stopAcceptingStreams()
        stopWatching()
        deadlineTimer?.cancel()
        deadlineTimer = nil
        let error = closeError ?? ExchangeError.connectionClosed
        let unanswered = streams
        streams.removeAll()
        for stream in unanswered.values { stream.completion?.resume(throwing: error) }
        context.fireChannelInactive()
    }

    /// Completes a stream with its answer.
    private func answer(_ streamID: HTTP2StreamID) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        stream.completion?.resume(with: Result { try stream.response() })
        streamEnded()
    }

    /// Completes a stream with why it has no answer; a stream already completed stays so.
    private func fail(_ streamID: HTTP2StreamID, _ error: any Error) {
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        stream.completion?.resume(throwing: error)
        streamEnded()
    }

    private func streamEnded() {
        if streams.isEmpty { idleSince = .now() }
        if let context { closeIfDrained(context: context) }
    }

    private func stopAcceptingStreams() {
        goingAway = true
        state.markUnusable()
    }

    private func closeIfDrained(context: ChannelHandlerContext) {
        if goingAway, streams.isEmpty, context.channel.isActive { context.close(promise: nil) }
    }

    private func reset(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))), promise: nil)
        scheduleFlush(on: context)
    }

    // MARK: Timeouts

    private func trackDeadline(of streamID: HTTP2StreamID, on eventLoop: any EventLoop) {
        // Streams answered long ago leave the head here, so the buffer stays as long as
        // the streams under way.
        while let head = deadlines.first, streams[head.stream] == nil { deadlines.removeFirst() }
        deadlines.append((streamID, .now() + requestTimeout))
        if deadlineTimer == nil { armDeadlineTimer(on: eventLoop) }
    }

    private func armDeadlineTimer(on eventLoop: any EventLoop) {
        guard let head = deadlines.first else { return }
        deadlineTimer = eventLoop.assumeIsolated().scheduleTask(deadline: head.deadline) { [self] in
            deadlineTimer = nil
            expireStreams(on: eventLoop)
        }
    }

    private func expireStreams(on eventLoop: any EventLoop) {
        let now = NIODeadline.now()
        while let head = deadlines.first, head.deadline <= now || streams[head.stream] == nil {
            deadlines.removeFirst()
            guard streams[head.stream] != nil else { continue }
            // Failed before the reset, whose stream-closed event would name a reset instead.
            fail(head.stream, ExchangeError.timedOut(requestTimeout))
            if let context { reset(head.stream, context: context) }
        }
        armDeadlineTimer(on: eventLoop)
    }

    // MARK: Liveness

    /// One timer serves both watches: it fires when the server has been silent for
    /// `pingAfterSilence` (then a PING goes out) or the connection idle for `idleTimeout`,
    /// whichever comes first, and re-arms itself from what happened meanwhile.
    private func armLivenessTimer(at deadline: NIODeadline, on eventLoop: any EventLoop) {
        livenessTimer = eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            livenessTimer = nil
            checkLiveness(on: eventLoop)
        }
    }

    private func checkLiveness(on eventLoop: any EventLoop) {
        guard let context, context.channel.isActive else { return }
        let now = NIODeadline.now()
        if let idleSince, now - idleSince >= liveness.idleTimeout {
            stopAcceptingStreams()
            context.close(promise: nil)
            return
        }
        if pingAwaited == nil, now - lastHeard >= liveness.pingAfterSilence { sendPing(context: context) }
        var next = (pingAwaited == nil ? lastHeard : now) + liveness.pingAfterSilence
        if let idleSince { next = min(next, idleSince + liveness.idleTimeout) }
        armLivenessTimer(at: max(next, now + .milliseconds(1)), on: eventLoop)
    }

    private func sendPing(context: ChannelHandlerContext) {
        pingsSent += 1
        pingAwaited = context.eventLoop.assumeIsolated().scheduleTask(in: liveness.pingTimeout) { [self] in
            pingAwaited = nil
            closeAsDead()
        }
        let data = HTTP2PingData(withInteger: pingsSent)
        context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(data, ack: false))), promise: nil)
        scheduleFlush(on: context)
    }

    /// The server did not answer the PING: its streams fail now, as a closed connection's do.
    private func closeAsDead() {
        closeError = closeError ?? ExchangeError.unresponsive(liveness.pingTimeout)
        stopAcceptingStreams()
        context?.close(promise: nil)
    }

    private func stopWatching() {
        livenessTimer?.cancel()
        livenessTimer = nil
        pingAwaited?.cancel()
        pingAwaited = nil
    }
}
