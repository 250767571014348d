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

    public init(maximumConcurrentStreams: Int = 100, goAwayEveryRequests: Int? = nil, resetShare: Double = 0,
                streamLimitChange: (afterRequests: Int, limit: Int)? = nil, goAwayBelowEveryRequests: Int? = nil,
                refuseShare: Double = 0) {
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
                                  observeHTTP2Connection: observe, prepareConnection: prepare)
    }
}

/// The HTTP/2 faults of one connection. Every stream of a connection runs on the
/// connection's event loop, and this state is only touched there.
final class HTTP2ConnectionFaults: HTTP2ConnectionObserver, @unchecked Sendable {
    private let behaviour: HTTP2ServerBehaviour
    private let connection: any Channel
    private let statistics: HTTPServerStatistics
    private var requests = 0
    private var openStreams = 0
    private var highestStreamID = HTTP2StreamID.rootStream
    private var goingAway = false
    /// Set by a GOAWAY below open streams: requests from then on are left unprocessed.
    private var withholding = false
    private var closeScheduled = false

    init(behaviour: HTTP2ServerBehaviour, connection: any Channel, statistics: HTTPServerStatistics) {
        self.behaviour = behaviour
        self.connection = connection
        self.statistics = statistics
    }

    func streamOpened(_ id: HTTP2StreamID?) {
        connection.eventLoop.preconditionInEventLoop()
        openStreams += 1
        statistics.noteOpenStreams(openStreams)
        if let id, id > highestStreamID { highestStreamID = id }
    }

    /// Once the last stream before the GOAWAY finished, the connection closes after a grace
    /// period (unless the client closed it first), as a front end does: closing at once would
    /// reset the TCP connection under streams the client sent meanwhile, and the client would
    /// lose the GOAWAY and the last answers with them.
    func streamClosed() {
        openStreams -= 1
        guard goingAway, openStreams == 0, !closeScheduled else { return }
        closeScheduled = true
        let connection = connection
        connection.eventLoop.scheduleTask(in: .seconds(1)) { connection.close(promise: nil) }
    }

    func requestArrived(on id: HTTP2StreamID?) -> HTTP2RequestFate {
        if withholding {
            statistics.count(\.streamsAboveGoAway)
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
        if let every = behaviour.goAwayBelowEveryRequests, (requests + 1) % every == 0, !goingAway, let id {
            goAwayBelow(id)
            return .withhold
        }
        countRequest()
        return .answer
    }

    /// GOAWAY naming the stream before `id` as the last processed: `id` and every later stream
    /// are left for the client to send again. The connection closes after a grace period.
    private func goAwayBelow(_ id: HTTP2StreamID) {
        goingAway = true
        withholding = true
        statistics.count(\.goAwaysSent)
        statistics.count(\.streamsAboveGoAway)
        let last = HTTP2StreamID(max(0, Int(id) - 2))
        connection.writeAndFlush(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: last, errorCode: .noError, opaqueData: nil)),
                                 promise: nil)
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
