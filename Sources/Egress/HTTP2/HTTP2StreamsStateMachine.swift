import NIOCore
import NIOHTTP2

/// The decisions of one client HTTP/2 connection, without a socket: which stream ID a request
/// gets or why it is refused, when a stream times out, when the connection stops taking
/// requests and when it closes, when a silent server is pinged and when it is given up, and
/// when read answers are returned to the connection window. `HTTP2StreamsHandler` turns events
/// (frames, timers, its own writes) into calls here and performs what comes back; tests drive
/// it with stand-in streams and a clock of their own.
///
/// It owns the streams under way: `Stream` is whatever the handler completes (an exchange).
struct HTTP2StreamsStateMachine<Stream> {
    /// The connection window raised to at the start; answers read are returned to it when a
    /// quarter of it was used.
    static var connectionWindow: Int { 1 << 24 }

    let requestTimeout: TimeAmount
    let liveness: HTTP2Liveness
    private var streams: [HTTP2StreamID: Stream] = [:]
    private var nextStreamNumber: Int32
    /// No new stream: GOAWAY, stream IDs used up, an error, a dead or idle connection.
    private(set) var isGoingAway = false
    /// Why the connection ends, when something went wrong before it closed.
    private(set) var closeError: (any Error)?
    /// Every stream's deadline, in the order the streams started. One timeout for all requests
    /// keeps this sorted, so one timer at the head serves every stream.
    private var deadlines = CircularBuffer<(stream: HTTP2StreamID, deadline: NIODeadline)>(initialCapacity: 64)
    private var deadlineTimerArmed = false
    /// When the server last sent a frame, and when the last stream ended (or the connection began).
    private var lastHeard: NIODeadline
    private var idleSince: NIODeadline?
    private(set) var isPingAwaited = false
    private var pingsSent: UInt64 = 0
    private var bytesToReturn = 0

    /// - Parameter firstStreamNumber: the client's first stream is 1 (odd, RFC 9113 §5.1.1);
    ///   another odd number starts a connection further along, as when testing the end of IDs.
    init(requestTimeout: TimeAmount, liveness: HTTP2Liveness, now: NIODeadline, firstStreamNumber: Int32 = 1) {
        self.nextStreamNumber = firstStreamNumber
        self.requestTimeout = requestTimeout
        self.liveness = liveness
        self.lastHeard = now
        self.idleSince = now
    }

    var streamsUnderWay: Int { streams.count }

    subscript(streamID: HTTP2StreamID) -> Stream? { streams[streamID] }

    // MARK: Streams

    enum StartAction {
        case refuse(ExchangeError)
        /// Send on `streamID`; arm the deadline timer for `armDeadlineTimer` when given.
        case open(HTTP2StreamID, armDeadlineTimer: NIODeadline?)
    }

    mutating func start(_ stream: Stream, now: NIODeadline) -> StartAction {
        guard !isGoingAway, closeError == nil else { return .refuse(.notSent) }
        let streamID = HTTP2StreamID(nextStreamNumber)
        nextStreamNumber += 2
        if nextStreamNumber > Int32.max - 2 { stopAcceptingStreams() }
        streams[streamID] = stream
        idleSince = nil
        // Streams answered long ago leave the head here, so the buffer stays as long as the
        // streams under way.
        while let head = deadlines.first, streams[head.stream] == nil { deadlines.removeFirst() }
        deadlines.append((streamID, now + requestTimeout))
        guard !deadlineTimerArmed else { return .open(streamID, armDeadlineTimer: nil) }
        deadlineTimerArmed = true
        return .open(streamID, armDeadlineTimer: deadlines.first!.deadline)
    }

    /// The stream is over, answered or failed: it leaves, and the connection closes now when it
    /// was the last one of a connection going away. Nil when it had already ended.
    mutating func end(_ streamID: HTTP2StreamID, now: NIODeadline) -> (stream: Stream, closeConnection: Bool)? {
        guard let stream = streams.removeValue(forKey: streamID) else { return nil }
        if streams.isEmpty { idleSince = now }
        return (stream, shouldCloseNow)
    }

    // MARK: The connection

    /// Any frame shows the path alive. True when it answers a PING awaited: its timer goes.
    mutating func heardFrame(now: NIODeadline) -> Bool {
        lastHeard = now
        defer { isPingAwaited = false }
        return isPingAwaited
    }

    /// GOAWAY: no new stream. The streams above its last one were never processed: they leave,
    /// to fail as refused (safe to send again); those below are answered before the server
    /// closes. `closeNow` when none is left.
    mutating func receivedGoAway(lastStreamID: HTTP2StreamID) -> (refused: [Stream], closeNow: Bool) {
        stopAcceptingStreams()
        let refusedIDs = streams.keys.filter { $0 > lastStreamID }.sorted()
        let refused = refusedIDs.map { streams.removeValue(forKey: $0)! }
        return (refused, shouldCloseNow)
    }

    /// The connection failed; it closes, and its streams fail with the first error.
    mutating func failed(_ error: any Error) {
        closeError = closeError ?? error
        stopAcceptingStreams()
    }

    /// The connection closed: every stream under way, to fail with the returned error.
    mutating func closed() -> (error: any Error, unanswered: [Stream]) {
        stopAcceptingStreams()
        let unanswered = Array(streams.values)
        streams.removeAll()
        deadlines.removeAll()
        return (closeError ?? ExchangeError.connectionClosed, unanswered)
    }

    /// `bytes` of answers read. The window increment to send now, once a quarter of the
    /// window is to be returned (without a multiplexer, returning them is this connection's job).
    mutating func consumed(bytes: Int) -> Int? {
        bytesToReturn += bytes
        guard bytesToReturn >= Self.connectionWindow / 4 else { return nil }
        defer { bytesToReturn = 0 }
        return bytesToReturn
    }

    /// Going away with no stream left: nothing more will happen on the connection.
    var shouldCloseNow: Bool { isGoingAway && streams.isEmpty }

    private mutating func stopAcceptingStreams() {
        isGoingAway = true
    }

    // MARK: Timeouts

    /// The deadline timer fired: the streams past their deadline, to fail as timed out and
    /// reset, and when to arm the timer next (nil: no stream left to watch).
    mutating func expireDeadlines(now: NIODeadline) -> (expired: [(HTTP2StreamID, Stream)], next: NIODeadline?) {
        var expired: [(HTTP2StreamID, Stream)] = []
        while let head = deadlines.first, head.deadline <= now || streams[head.stream] == nil {
            deadlines.removeFirst()
            if let stream = streams.removeValue(forKey: head.stream) { expired.append((head.stream, stream)) }
        }
        if !expired.isEmpty, streams.isEmpty { idleSince = now }
        deadlineTimerArmed = deadlines.first != nil
        return (expired, deadlines.first?.deadline)
    }

    /// When the liveness timer first fires.
    var firstLivenessCheck: NIODeadline { lastHeard + min(liveness.pingAfterSilence, liveness.idleTimeout) }

    enum LivenessAction: Equatable {
        /// Idle for the idle timeout: close.
        case close
        /// Send `ping` when given, and arm the PING's timeout with it; check again at `next`.
        case checkAgain(at: NIODeadline, ping: HTTP2PingData?)
    }

    /// One timer serves both watches: it fires when the server has been silent for
    /// `pingAfterSilence` (then a PING goes out) or the connection idle for `idleTimeout`,
    /// whichever comes first.
    mutating func checkLiveness(now: NIODeadline) -> LivenessAction {
        if let idleSince, now - idleSince >= liveness.idleTimeout {
            stopAcceptingStreams()
            return .close
        }
        var ping: HTTP2PingData?
        if !isPingAwaited, now - lastHeard >= liveness.pingAfterSilence {
            pingsSent += 1
            isPingAwaited = true
            ping = HTTP2PingData(withInteger: pingsSent)
        }
        var next = (isPingAwaited ? now : lastHeard) + liveness.pingAfterSilence
        if let idleSince { next = min(next, idleSince + liveness.idleTimeout) }
        return .checkAgain(at: max(next, now + .milliseconds(1)), ping: ping)
    }

    /// The PING went unanswered: the connection is dead; it closes and its streams fail now
    /// instead of each waiting for its request timeout.
    mutating func pingTimedOut() {
        isPingAwaited = false
        failed(ExchangeError.unresponsive(liveness.pingTimeout))
    }
}
