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

    public init(maximumConcurrentStreams: Int = 100, goAwayEveryRequests: Int? = nil, resetShare: Double = 0,
                streamLimitChange: (afterRequests: Int, limit: Int)? = nil) {
        self.maximumConcurrentStreams = maximumConcurrentStreams
        self.goAwayEveryRequests = goAwayEveryRequests
        self.resetShare = resetShare
        self.streamLimitChange = streamLimitChange
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
    func serverOptions(path: SilentPath?) -> HTTPServer.Options {
        let behaviour = http2
        let observe: @Sendable (any Channel, HTTPServerStatistics) -> any HTTP2ConnectionObserver = { connection, statistics in
            HTTP2ConnectionFaults(behaviour: behaviour, connection: connection, statistics: statistics)
        }
        var prepare: (@Sendable (any Channel) throws -> Void)?
        if let path { prepare = { channel in try path.prepare(channel) } }
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

    func requestArrived() -> HTTP2RequestFate {
        if behaviour.resetShare > 0, Double.random(in: 0..<1) < behaviour.resetShare {
            statistics.count(\.streamsReset)
            return .reset
        }
        countRequest()
        return .answer
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
