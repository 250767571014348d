import NIOCore
import NIOHPACK
import NIOHTTP2

/// The client end of one HTTP/2 connection, straight on the TLS bytes: requests become
/// HEADERS and DATA frames written into one buffer, and everything written in an event-loop
/// turn leaves in one write and flush. Answers are read frame by frame; header blocks are
/// decoded by NIOHPACK. No per-stream channel, pipeline or frame value is built: a request
/// is a dictionary entry, and a frame a slice of what was read.
///
/// `HTTP2StreamsStateMachine` decides (stream IDs, timeouts, GOAWAY, PINGs, idling, the
/// connection window); this handler frames, runs timers and completes requests as it says.
/// It keeps the rules the server holds it to: the server's SETTINGS (its stream limit, which
/// also goes to the pool, its windows and frame size), flow control of the bodies sent, PING
/// answers, and a GOAWAY with the reason when the server breaks the protocol.
///
/// Everything here runs on the connection's event loop.
final class HTTP2StreamsHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// What the relay asks of the server: no push; a stream window that covers the largest
    /// answer accepted, so stream windows never need updating; header lists up to 64 KiB.
    static let initialSettings: [(identifier: UInt16, value: UInt32)] = [
        (0x2, 0), (0x4, UInt32(Exchange.maximumBodyBytes)), (0x6, 1 << 16),
    ]

    private let authority: String
    /// Mirrors for the pool, on other threads, what the state machine decided.
    private let state: ConnectionState
    private var machine: HTTP2StreamsStateMachine<Exchange>
    private var context: ChannelHandlerContext?
    private var reader = HTTP2FrameReader()
    private var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
    /// A header block whose CONTINUATION frames are still to come: its stream and whether it ends it.
    private var continuing: (stream: HTTP2StreamID, endStream: Bool, block: ByteBuffer)?
    /// Frames written this turn, sent at its end in one write.
    private var output = ByteBuffer()
    private var block = ByteBuffer()
    private var flushScheduled = false

    /// The server's rules for what the relay sends: stream limit, windows, frame size.
    private var flow = HTTP2SendFlow()

    private var deadlineTimer: Scheduled<Void>?
    private var livenessTimer: Scheduled<Void>?
    /// The timer that closes the connection unless the server answers the PING sent.
    private var pingTimer: Scheduled<Void>?

    init(authority: String, requestTimeout: TimeAmount, liveness: HTTP2Liveness, state: ConnectionState) {
        self.authority = authority
        self.state = state
        self.machine = HTTP2StreamsStateMachine(requestTimeout: requestTimeout, liveness: liveness, now: .now())
        self.decoder.maxHeaderListSize = 1 << 16
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        output = context.channel.allocator.buffer(capacity: 4096)
        block = context.channel.allocator.buffer(capacity: 2048)
        output.writeBytes(ByteBuffer.http2Preface)
        output.writeSettings(Self.initialSettings)
        // The default 64 KiB connection window would let only that many bytes of answers
        // be in flight across all streams before the server waits for an update.
        output.writeWindowUpdate(HTTP2StreamsStateMachine<Exchange>.connectionWindow - HTTP2SendFlow.defaultWindow, stream: .rootStream)
        scheduleFlush(on: context)
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
        if flow.start(streamID) { open(exchange, streamID) }
        scheduleFlush(on: context)
    }

    /// Writes the stream's HEADERS and as much of its body as the windows allow.
    private func open(_ exchange: Exchange, _ streamID: HTTP2StreamID) {
        let request = exchange.request
        block.clear()
        RequestHeaderBlock.write(request, authority: authority, into: &block)
        output.writeHeaders(block, stream: streamID, endStream: request.body == nil, maximumFrameSize: flow.maximumFrameSize)
        if let body = request.body {
            exchange.unsentBody = body
            sendBody(of: exchange, streamID)
        }
    }

    /// Sends the body as far as the stream's and the connection's windows allow; the rest
    /// waits for the server's WINDOW_UPDATE.
    private func sendBody(of exchange: Exchange, _ streamID: HTTP2StreamID) {
        guard var body = exchange.unsentBody else { return }
        while true {
            let allowed = flow.sendable(body.readableBytes, on: streamID)
            guard allowed > 0 || body.readableBytes == 0 else {
                exchange.unsentBody = body
                return
            }
            let chunk = body.readSlice(length: allowed)!
            let last = body.readableBytes == 0
            output.writeData(chunk, stream: streamID, endStream: last)
            if last {
                exchange.unsentBody = nil
                return
            }
        }
    }

    /// The windows grew: streams waiting for them send on, in stream order.
    private func resumeBodies() {
        for streamID in flow.windowsGrew() {
            if let exchange = machine[streamID] { sendBody(of: exchange, streamID) }
        }
    }

    /// Streams that waited for the server's limit open.
    private func open(_ streams: [HTTP2StreamID]) {
        for streamID in streams {
            if let exchange = machine[streamID] { open(exchange, streamID) }
        }
    }

    /// The caller's task was cancelled: the request ends now with `CancellationError` and
    /// its stream is reset, so that the server stops working on it.
    func cancel(_ exchange: Exchange) {
        exchange.isCancelled = true
        guard let streamID = exchange.streamID, machine[streamID] === exchange else { return }
        fail(streamID, CancellationError())
    }

    /// Writes started in this event-loop turn leave in one flush: one TLS record and one
    /// system call for a burst of requests instead of one per frame.
    private func scheduleFlush(on context: ChannelHandlerContext) {
        guard !flushScheduled else { return }
        flushScheduled = true
        context.eventLoop.assumeIsolated().execute { [self] in
            flushScheduled = false
            flushNow()
        }
    }

    private func flushNow() {
        guard let context, output.readableBytes > 0 else { return }
        context.writeAndFlush(wrapOutboundOut(output), promise: nil)
        output.clear()  // a new buffer when the one written is still held
    }

    // MARK: Answers

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        reader.append(unwrapInboundIn(data))
        // Whatever the server sent shows the path alive: the clock is read once per read, not per frame.
        if machine.heardFrame(now: .now()) {
            pingTimer?.cancel()
            pingTimer = nil
        }
        do {
            while let frame = try reader.next() {
                try received(frame, context: context)
                guard self.context != nil, context.channel.isActive else { return }
            }
        } catch {
            breakConnection(error, context: context)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushNow()
        context.fireChannelReadComplete()
    }

    private func received(_ frame: HTTP2ReadFrame, context: ChannelHandlerContext) throws(HTTP2ConnectionError) {
        if let continuing, frame.type != .continuation || frame.streamID != continuing.stream {
            throw .protocolError("a header block of stream \(continuing.stream) interrupted")
        }
        guard let type = frame.type else { return }  // unknown types are ignored (RFC 9113 §4.1)
        switch type {
        case .data: try receivedData(frame, context: context)
        case .headers:
            try requireStream(frame)
            let endStream = frame.flags.contains(.endStream)
            try receivedHeaderFragment(try frame.unpadded(), of: frame.streamID, endStream: endStream,
                                       ends: frame.flags.contains(.endHeaders))
        case .continuation:
            guard let continuing else { throw .protocolError("CONTINUATION without HEADERS") }
            self.continuing = nil
            var block = continuing.block
            var fragment = frame.payload
            block.writeBuffer(&fragment)
            try receivedHeaderFragment(block, of: continuing.stream, endStream: continuing.endStream,
                                       ends: frame.flags.contains(.endHeaders))
        case .rstStream:
            try requireStream(frame)
            guard frame.payload.readableBytes == 4 else { throw .frameSizeError("RST_STREAM of \(frame.payload.readableBytes) bytes") }
            let code = HTTP2ErrorCode(networkCode: Int(frame.payload.getInteger(at: frame.payload.readerIndex, as: UInt32.self)!))
            fail(frame.streamID, ExchangeError.streamReset(code), resetWith: nil)
        case .settings: try receivedSettings(frame)
        case .ping:
            guard frame.streamID == .rootStream else { throw .protocolError("PING on stream \(frame.streamID)") }
            guard frame.payload.readableBytes == 8 else { throw .frameSizeError("PING of \(frame.payload.readableBytes) bytes") }
            if !frame.flags.contains(.ack) {
                output.writePing(frame.payload.getInteger(at: frame.payload.readerIndex, as: UInt64.self)!, acknowledging: true)
            }
        case .goAway:
            guard frame.streamID == .rootStream else { throw .protocolError("GOAWAY on stream \(frame.streamID)") }
            guard frame.payload.readableBytes >= 8 else { throw .frameSizeError("GOAWAY of \(frame.payload.readableBytes) bytes") }
            let last = frame.payload.getInteger(at: frame.payload.readerIndex, as: UInt32.self)! & 0x7FFF_FFFF
            receivedGoAway(lastStreamID: HTTP2StreamID(Int32(last)), context: context)
        case .windowUpdate: try receivedWindowUpdate(frame)
        case .pushPromise: throw .protocolError("PUSH_PROMISE, though push is disabled")
        case .priority: break
        }
    }

    /// Connection-specific fields, which HTTP/2 forbids (RFC 9113 §8.2.2).
    private static let connectionFields: Set<String> = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"]

    /// What makes an answer's header block malformed (RFC 9113 §8.2, §8.3.2), or nil: names in
    /// lower case without connection-specific fields, values without NUL, CR or LF, and the
    /// pseudo-header `:status` first and alone, in the headers and not in trailers.
    static func malformation(of headers: HPACKHeaders, trailers: Bool) -> String? {
        var index = 0
        var statusSeen = false
        for (name, value, _) in headers {
            defer { index += 1 }
            if name.hasPrefix(":") {
                guard name == ":status", !trailers, index == 0 else { return "the pseudo-header \(name) where none may be" }
                statusSeen = true
            } else if name.utf8.contains(where: { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }) {
                return "an upper-case field name"
            } else if connectionFields.contains(name) || (name == "te" && value != "trailers") {
                return "the connection-specific field \(name)"
            }
            if value.utf8.contains(where: { $0 == 0 || $0 == 0x0A || $0 == 0x0D }) { return "a field value with NUL, CR or LF" }
        }
        return trailers || statusSeen ? nil : "no :status"
    }

    /// HEADERS, RST_STREAM and DATA belong to a stream the relay opened (push is disabled).
    private func requireStream(_ frame: HTTP2ReadFrame) throws(HTTP2ConnectionError) {
        guard frame.streamID != .rootStream, Int32(frame.streamID) % 2 == 1, frame.streamID <= flow.highestOpened else {
            throw .protocolError("\(frame.type.map { "\($0)" } ?? "a frame") on stream \(frame.streamID), which the relay did not open")
        }
    }

    private func receivedHeaderFragment(_ block: ByteBuffer, of streamID: HTTP2StreamID, endStream: Bool,
                                        ends: Bool) throws(HTTP2ConnectionError) {
        guard ends else {
            guard block.readableBytes <= 1 << 17 else { throw .init(code: .enhanceYourCalm, reason: "a header block past 128 KiB") }
            continuing = (streamID, endStream, block)
            return
        }
        var block = block
        let headers: HPACKHeaders
        do {
            // Every block is decoded, a stream's that ended too: the table is the connection's.
            headers = try decoder.decodeHeaders(from: &block)
        } catch {
            throw .init(code: .compressionError, reason: "a header block HPACK cannot decode (\(error))")
        }
        received(headers, endStream: endStream, on: streamID)
    }

    private func received(_ headers: HPACKHeaders, endStream: Bool, on streamID: HTTP2StreamID) {
        guard let stream = machine[streamID] else { return }
        if let malformed = Self.malformation(of: headers, trailers: stream.status != nil) {
            fail(streamID, ExchangeError.malformedResponse(malformed), resetWith: .protocolError)
            return
        }
        if stream.status == nil {
            guard let status = headers.first(name: ":status").flatMap({ Int($0) }) else {
                fail(streamID, ExchangeError.malformedResponse("a :status that is not a number"), resetWith: .protocolError)
                return
            }
            // An informational answer (100 Continue) precedes the real one.
            let retryAfter = stream.isGRPC ? nil : headers.first(name: "retry-after")
            guard stream.receivedStatus(status, retryAfter: retryAfter) else { return }
        }
        // gRPC's status comes in the trailers, or with the headers of a trailers-only answer.
        if stream.isGRPC, let grpcStatus = headers.first(name: "grpc-status") {
            stream.receivedGRPCStatus(GRPCStatusFields(status: grpcStatus, message: headers.first(name: "grpc-message"),
                                                       detailsBase64: headers.first(name: "grpc-status-details-bin")))
        }
        if endStream { answer(streamID) }
    }

    private func receivedData(_ frame: HTTP2ReadFrame, context: ChannelHandlerContext) throws(HTTP2ConnectionError) {
        try requireStream(frame)
        // The whole frame counts against the window, padding included, for a stream that ended too.
        if let increment = machine.consumed(bytes: frame.payload.readableBytes) {
            output.writeWindowUpdate(increment, stream: .rootStream)
        }
        var bytes = try frame.unpadded()
        guard let stream = machine[frame.streamID] else { return }
        do {
            try stream.receivedBody(&bytes)
        } catch {
            fail(frame.streamID, error)
            return
        }
        if frame.flags.contains(.endStream) { answer(frame.streamID) }
    }

    private func receivedSettings(_ frame: HTTP2ReadFrame) throws(HTTP2ConnectionError) {
        guard frame.streamID == .rootStream else { throw .protocolError("SETTINGS on stream \(frame.streamID)") }
        if frame.flags.contains(.ack) {
            guard frame.payload.readableBytes == 0 else { throw .frameSizeError("SETTINGS acknowledgement with a payload") }
            return
        }
        guard frame.payload.readableBytes % 6 == 0 else { throw .frameSizeError("SETTINGS of \(frame.payload.readableBytes) bytes") }
        var payload = frame.payload
        var (streamLimit, initialWindow, frameSize): (UInt32?, UInt32?, UInt32?) = (nil, nil, nil)
        while let identifier = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
            switch identifier {
            case 0x3: streamLimit = value  // MAX_CONCURRENT_STREAMS
            case 0x4: initialWindow = value  // INITIAL_WINDOW_SIZE
            case 0x5: frameSize = value  // MAX_FRAME_SIZE
            default: break  // the header table (the relay never indexes), push, header list size, unknown
            }
        }
        let opened = try flow.receivedSettings(streamLimit: streamLimit, initialWindow: initialWindow, maximumFrameSize: frameSize)
        // The pool opens connections from the limit too.
        if let streamLimit { state.announceStreamLimit(Int(streamLimit)) }
        output.writeSettingsAcknowledgement()
        resumeBodies()
        open(opened)
    }

    private func receivedWindowUpdate(_ frame: HTTP2ReadFrame) throws(HTTP2ConnectionError) {
        guard frame.payload.readableBytes == 4 else { throw .frameSizeError("WINDOW_UPDATE of \(frame.payload.readableBytes) bytes") }
        let increment = Int(frame.payload.getInteger(at: frame.payload.readerIndex, as: UInt32.self)! & 0x7FFF_FFFF)
        switch try flow.receivedWindowUpdate(increment, on: frame.streamID) {
        case .grew: resumeBodies()
        case .ignored: break
        case .resetStream(let reason):
            fail(frame.streamID, ExchangeError.malformedResponse(reason), resetWith: .flowControlError)
        }
    }

    private func receivedGoAway(lastStreamID: HTTP2StreamID, context: ChannelHandlerContext) {
        // No stream opens after a GOAWAY (RFC 9113 §6.8): those waiting for the limit are refused too.
        let neverOpened = flow.receivedGoAway()
        let (refused, _) = machine.receivedGoAway(lastStreamID: lastStreamID)
        publishUsability()
        for stream in refused {
            ended(stream)
            stream.completion?.resume(throwing: ExchangeError.refusedByGoAway)
        }
        for streamID in neverOpened { fail(streamID, ExchangeError.refusedByGoAway) }
        if machine.shouldCloseNow { close(context) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        machine.failed(error)
        publishUsability()
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        let (error, unanswered) = machine.closed()
        publishUsability()
        cancelTimers()
        for stream in unanswered {
            let sent = stream.streamID.map(flow.isOpen) ?? false
            stream.completion?.resume(throwing: sent ? error : ExchangeError.notSent)
        }
        context.fireChannelInactive()
    }

    /// The server broke the protocol: GOAWAY with the reason's code, and the connection closes;
    /// its streams fail with the reason.
    private func breakConnection(_ error: HTTP2ConnectionError, context: ChannelHandlerContext) {
        machine.failed(ExchangeError.malformedResponse("HTTP/2 \(error.code): \(error.reason)"))
        publishUsability()
        output.writeGoAway(lastStream: .rootStream, code: error.code)
        flushNow()
        close(context)
    }

    /// Completes a stream with its answer.
    private func answer(_ streamID: HTTP2StreamID) {
        guard let (stream, closeConnection) = machine.end(streamID, now: .now()) else { return }
        ended(stream)
        stream.completion?.resume(with: Result { try stream.response() })
        if closeConnection, let context { close(context) }
    }

    /// Completes a stream with why it has no answer; a stream already completed stays so. An
    /// open stream the server did not end is reset, so that it stops working on it.
    /// `resetWith` nil: the server ended the stream itself (RST_STREAM).
    private func fail(_ streamID: HTTP2StreamID, _ error: any Error, resetWith code: HTTP2ErrorCode? = .cancel) {
        guard let (stream, closeConnection) = machine.end(streamID, now: .now()) else { return }
        if let code, flow.isOpen(streamID) { reset(streamID, code: code) }
        ended(stream)
        stream.completion?.resume(throwing: error)
        if closeConnection, let context { close(context) }
    }

    /// A stream left the state machine: the streams waiting for the limit open in its place.
    private func ended(_ stream: Exchange) {
        stream.unsentBody = nil
        if let streamID = stream.streamID { open(flow.ended(streamID)) }
    }

    /// The pool starts no request on a connection the machine stopped taking them.
    private func publishUsability() {
        if machine.isGoingAway { state.markUnusable() }
    }

    private func close(_ context: ChannelHandlerContext) {
        flushNow()
        if context.channel.isActive { context.close(promise: nil) }
    }

    private func reset(_ streamID: HTTP2StreamID, code: HTTP2ErrorCode = .cancel) {
        output.writeResetStream(streamID, code: code)
        if let context { scheduleFlush(on: context) }
    }

    // MARK: Timers

    private func armDeadlineTimer(at deadline: NIODeadline, on eventLoop: any EventLoop) {
        deadlineTimer = eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            deadlineTimer = nil
            let (expired, next) = machine.expireDeadlines(now: .now())
            for (streamID, stream) in expired {
                if flow.isOpen(streamID) { reset(streamID) }
                ended(stream)
                stream.completion?.resume(throwing: ExchangeError.timedOut(machine.requestTimeout))
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
                close(context)
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
        output.writePing(ping.integer, acknowledging: false)
        scheduleFlush(on: context)
    }

    private func cancelTimers() {
        for timer in [deadlineTimer, livenessTimer, pingTimer] { timer?.cancel() }
        deadlineTimer = nil
        livenessTimer = nil
        pingTimer = nil
    }
}
