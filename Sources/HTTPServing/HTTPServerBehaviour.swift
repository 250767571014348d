import Synchronization

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

/// What the server saw at the connection layer: tests prove a fault really happened.
public final class HTTPServerStatistics: Sendable {
    public struct Counts: Sendable {
        public var connections = 0
        public var connectionsClosed = 0
        /// The most streams one HTTP/2 connection had open at once.
        public var mostOpenStreams = 0
        public var http1Requests = 0
        public var http2Requests = 0
        public var goAwaysSent = 0
        public var streamsReset = 0
    }

    private let counts = Mutex(Counts())

    public var current: Counts { counts.withLock { $0 } }

    func count(_ field: WritableKeyPath<Counts, Int>) {
        counts.withLock { $0[keyPath: field] += 1 }
    }

    func noteOpenStreams(_ open: Int) {
        counts.withLock { $0.mostOpenStreams = max($0.mostOpenStreams, open) }
    }

    /// Starts `mostOpenStreams` again from zero, to measure a phase of a test.
    public func resetMostOpenStreams() {
        counts.withLock { $0.mostOpenStreams = 0 }
    }
}
