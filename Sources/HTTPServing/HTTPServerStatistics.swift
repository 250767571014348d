import Synchronization

/// What the server saw at the connection layer: tests prove a fault really happened.
public final class HTTPServerStatistics: Sendable {
    public struct Counts: Sendable {
        public var connections = 0
        public var connectionsClosed = 0
        /// HTTP/2 streams refused with RST_STREAM(REFUSED_STREAM), and left unprocessed above a GOAWAY's last stream.
        public var streamsRefused = 0
        public var streamsAboveGoAway = 0
        /// The most streams one HTTP/2 connection had open at once.
        public var mostOpenStreams = 0
        public var http1Requests = 0
        public var http2Requests = 0
        public var goAwaysSent = 0
        public var streamsReset = 0
    }

    private let counts = Mutex(Counts())

    public var current: Counts { counts.withLock { $0 } }

    public func count(_ field: WritableKeyPath<Counts, Int>) {
        counts.withLock { $0[keyPath: field] += 1 }
    }

    public func noteOpenStreams(_ open: Int) {
        counts.withLock { $0.mostOpenStreams = max($0.mostOpenStreams, open) }
    }

    /// Starts `mostOpenStreams` again from zero, to measure a phase of a test.
    public func resetMostOpenStreams() {
        counts.withLock { $0.mostOpenStreams = 0 }
    }
}
