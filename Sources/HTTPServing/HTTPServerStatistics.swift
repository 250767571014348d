import Synchronization

/// What the server saw at the connection layer: tests prove a fault really happened.
public final class HTTPServerStatistics: Sendable {
    public struct Counts: Sendable {
        public var connections = 0
        public var connectionsClosed = 0
        /// HTTP/2 streams refused with RST_STREAM(REFUSED_STREAM) by the fault plan.
        public var streamsRefused = 0
        /// Streams above a GOAWAY's last stream, open when it was sent or opened after it: none
        /// of them was processed.
        public var streamsAboveGoAway = 0
        /// The most streams one HTTP/2 connection had open at once.
        public var mostOpenStreams = 0
        public var http1Requests = 0
        public var http2Requests = 0
        public var goAwaysSent = 0
        public var streamsReset = 0
        /// Requests answered, unprocessed, with a malformed header block by the fault plan.
        public var malformedAnswers = 0
        /// HTTP/2 `authorization` fields sent never-indexed, and sent so that HPACK may index them.
        public var authorizationsNeverIndexed = 0
        public var authorizationsIndexable = 0
        /// Bytes every connection carried, as they crossed the socket.
        public var bytesReceived = 0
        public var bytesSent = 0
    }

    /// A request the server left unprocessed, and when.
    public struct WithheldRequest: Sendable {
        public let request: HTTPRequest
        public let at: ContinuousClock.Instant
    }

    private let counts = Mutex(Counts())
    private let withheld = Mutex<[WithheldRequest]>([])

    /// Every request left unprocessed whole (above a GOAWAY's last stream), in order: tests
    /// time how soon the client sent each again.
    public var withheldRequests: [WithheldRequest] { withheld.withLock { $0 } }

    public func noteWithheld(_ request: HTTPRequest) {
        withheld.withLock { $0.append(WithheldRequest(request: request, at: .now)) }
    }

    private let bytesReceived = Atomic(0)
    private let bytesSent = Atomic(0)

    public var current: Counts {
        var current = counts.withLock { $0 }
        current.bytesReceived = bytesReceived.load(ordering: .relaxed)
        current.bytesSent = bytesSent.load(ordering: .relaxed)
        return current
    }

    /// Called for every read and write: atomics, not the lock of the other counts.
    func addBytes(received: Int = 0, sent: Int = 0) {
        if received > 0 { bytesReceived.add(received, ordering: .relaxed) }
        if sent > 0 { bytesSent.add(sent, ordering: .relaxed) }
    }

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
