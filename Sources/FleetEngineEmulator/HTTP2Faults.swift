import HTTPServing
import NIOCore
import NIOHTTP2

/// How the HTTP/2 connection layer behaves, including faults Google's front ends produce.
public struct HTTP2ServerBehaviour: Sendable {
    /// SETTINGS_MAX_CONCURRENT_STREAMS advertised to clients (Google's front ends say 100).
    public var maximumConcurrentStreams: Int
    /// Send GOAWAY after every this many requests of one connection, then close it once its
    /// streams finished, as a front end does when it drains a connection.
    public var goAwayEveryRequests: Int?
    /// Share (0–1) of requests answered with RST_STREAM instead of a response (nothing applied).
    public var resetShare: Double
    /// After this many requests of a connection, announce a new SETTINGS_MAX_CONCURRENT_STREAMS
    /// on it, as a server does that changes its mind under load.
    public var streamLimitChange: (afterRequests: Int, limit: Int)?
    /// Every this many requests of a connection, send GOAWAY naming as the last stream
    /// processed the one before the request that triggered it: that request and every later
    /// one on the connection are left unprocessed, and the client must send them again
    /// elsewhere (RFC 9113 §6.8).
    public var goAwayBelowEveryRequests: Int?
    /// Share (0–1) of requests refused with RST_STREAM(REFUSED_STREAM), unprocessed (RFC 9113 §8.7).
    public var refuseShare: Double
    /// SETTINGS_INITIAL_WINDOW_SIZE announced: a small one makes clients send bodies in pieces,
    /// each waiting for the server's WINDOW_UPDATE (nil: HTTP/2's 65,535).
    public var streamWindow: Int?
    /// Share (0–1) of requests left unprocessed and answered with a header block no client may
    /// accept (an upper-case field name): a client that took it for an answer would lose the update.
    public var malformedAnswerShare: Double

    public init(maximumConcurrentStreams: Int = 100, goAwayEveryRequests: Int? = nil, resetShare: Double = 0,
                streamLimitChange: (afterRequests: Int, limit: Int)? = nil, goAwayBelowEveryRequests: Int? = nil,
                refuseShare: Double = 0, streamWindow: Int? = nil, malformedAnswerShare: Double = 0) {
        self.streamWindow = streamWindow
        self.malformedAnswerShare = malformedAnswerShare
        self.maximumConcurrentStreams = maximumConcurrentStreams
        self.goAwayEveryRequests = goAwayEveryRequests
        self.resetShare = resetShare
        self.streamLimitChange = streamLimitChange
        self.goAwayBelowEveryRequests = goAwayBelowEveryRequests
        self.refuseShare = refuseShare
    }
}

/// How the emulator serves: TLS (nil: plain HTTP/1.1) and the HTTP/2 connection faults.
public struct EmulatorOptions: Sendable {
    public var tls: ServerTLS?
    public var http2: HTTP2ServerBehaviour

    public init(tls: ServerTLS? = nil, http2: HTTP2ServerBehaviour = .init()) {
        self.tls = tls
        self.http2 = http2
    }

    /// The server's options, with a fault observer for every HTTP/2 connection and `path` at
    /// the network end of every connection.
    func serverOptions(path: SilentPath?, serverNames: ServerNames? = nil) -> HTTPServer.Options {
        let behaviour = http2
        let observe: @Sendable (any Channel, HTTPServerStatistics) -> any HTTP2ConnectionObserver = { connection, statistics in
            HTTP2ConnectionFaults(behaviour: behaviour, connection: connection, statistics: statistics)
        }
        var prepare: (@Sendable (any Channel) throws -> Void)?
        let readsNames = tls != nil
        if path != nil || serverNames != nil {
            prepare = { channel in
                try path?.prepare(channel)
                if readsNames { try serverNames?.prepare(channel) }
            }
        }
        return HTTPServer.Options(tls: tls, maximumConcurrentStreams: behaviour.maximumConcurrentStreams,
                                  streamWindow: behaviour.streamWindow, observeHTTP2Connection: observe, prepareConnection: prepare)
    }
}

/// The HTTP/2 faults of one connection. Every stream of a connection runs on the
/// connection's event loop, and this state is only touched there.
final class HTTP2ConnectionFaults: HTTP2ConnectionObserver, @unchecked Sendable {
    private let behaviour: HTTP2ServerBehaviour
    private let connection: any Channel
    private let statistics: HTTPServerStatistics
    private var requests = 0
    private var openStreams: Set<HTTP2StreamID> = []
    private var highestStreamID = HTTP2StreamID.rootStream
    /// The highest stream whose request was answered: a GOAWAY below open streams names it as
    /// the last processed, since every stream at or below the last must be (RFC 9113 §6.8).
    private var highestAnswered = HTTP2StreamID.rootStream
    private var goingAway = false
    /// The last stream a GOAWAY below open streams named: requests above it are left unprocessed.
    private var withholdingAbove: HTTP2StreamID?
    private var closeScheduled = false

    init(behaviour: HTTP2ServerBehaviour, connection: any Channel, statistics: HTTPServerStatistics) {
        self.behaviour = behaviour
        self.connection = connection
        self.statistics = statistics
    }

    func streamOpened(_ id: HTTP2StreamID?) {
        connection.eventLoop.preconditionInEventLoop()
        guard let id else { return }
        openStreams.insert(id)
        statistics.noteOpenStreams(openStreams.count)
        if id > highestStreamID { highestStreamID = id }
        if let last = withholdingAbove, id > last { statistics.count(\.streamsAboveGoAway) }
    }

    /// Once the last stream before the GOAWAY finished, the connection closes after a grace
    /// period (unless the client closed it first), as a front end does: closing at once would
    /// reset the TCP connection under streams the client sent meanwhile, and the client would
    /// lose the GOAWAY and the last answers with them.
    func streamClosed(_ id: HTTP2StreamID?) {
        if let id { openStreams.remove(id) }
        guard goingAway, openStreams.isEmpty else { return }
        closeAfterGrace()
    }

    func requestArrived(_ request: HTTPRequest, on id: HTTP2StreamID?) -> HTTP2RequestFate {
        if let last = withholdingAbove, let id, id > last {
            statistics.noteWithheld(request)
            return .withhold
        }
        if behaviour.resetShare > 0, Double.random(in: 0..<1) < behaviour.resetShare {
            statistics.count(\.streamsReset)
            return .reset
        }
        if behaviour.refuseShare > 0, Double.random(in: 0..<1) < behaviour.refuseShare {
            statistics.count(\.streamsRefused)
            return .refuse
        }
        if behaviour.malformedAnswerShare > 0, let id, Double.random(in: 0..<1) < behaviour.malformedAnswerShare {
            statistics.count(\.malformedAnswers)
            let beneath = try? connection.pipeline.syncOperations.handler(type: FramesBeneathHTTP2.self)
            beneath?.writeMalformedAnswer(on: id)
            return .withhold
        }
        if let every = behaviour.goAwayBelowEveryRequests, (requests + 1) % every == 0, !goingAway, let id, id > highestAnswered {
            goAwayBelow()
            statistics.noteWithheld(request)
            return .withhold
        }
        countRequest()
        if let id, id > highestAnswered { highestAnswered = id }
        return .answer
    }

    /// GOAWAY naming the highest stream answered so far as the last processed: the request that
    /// triggered it and every stream above the last, open now or opened before the client hears of it, are left for
    /// the client to send again, and counted. Streams below it are still answered. The GOAWAY
    /// goes beneath SwiftNIO's state machine, which would refuse the later streams unseen. The
    /// connection closes after a grace period.
    private func goAwayBelow() {
        goingAway = true
        withholdingAbove = highestAnswered
        statistics.count(\.goAwaysSent)
        for stream in openStreams where stream > highestAnswered { statistics.count(\.streamsAboveGoAway) }
        let beneath = try? connection.pipeline.syncOperations.handler(type: FramesBeneathHTTP2.self)
        beneath?.writeGoAway(lastStreamID: highestAnswered)
        closeAfterGrace()
    }

    private func closeAfterGrace() {
        guard !closeScheduled else { return }
        closeScheduled = true
        let connection = connection
        connection.eventLoop.scheduleTask(in: .seconds(1)) { connection.close(promise: nil) }
    }

    /// Every `goAwayEveryRequests`th request drains the connection: streams opened so far
    /// are answered, the client must open a new connection for anything after.
    private func countRequest() {
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
