import Metrics
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// HTTP/2 connections to one origin, as many as the server's stream limit needs: each request
/// goes to the connection with the fewest requests under way, preferring those on the caller's
/// event loop (a task running there sends and is resumed without a thread hop). When every
/// connection there carries as many requests as its server allows
/// (SETTINGS_MAX_CONCURRENT_STREAMS, as announced and whenever it changes, at most
/// `streamsPerConnection`), a new one is opened, up to `maximumConnections`; beyond that,
/// requests wait for a stream in `NIOHTTP2Handler`. A connection is made when first needed and
/// made again when the server sent GOAWAY, it closed, went silent (`HTTP2Liveness`) or idled
/// out; the old one finishes its streams first. A connection that cannot be made fails the
/// requests waiting for it at once, so the caller's backoff, not this pool, decides when to try
/// again.
///
/// Why not async-http-client, which the signers and the registry use: for the Fleet Engine
/// path it lacks
/// - more than one HTTP/2 connection per origin and event loop: it multiplexes one connection
///   per origin, so a relay with more requests in flight than the server's stream limit waits;
/// - an immediate resend on a new connection of a request the server certainly did not
///   process (GOAWAY above its last stream ID, REFUSED_STREAM), which keeps a draining front
///   end from costing a failed attempt and a backoff;
/// - the vehicle token as a never-indexed HPACK field (RFC 7541 §7.1.3), so that no
///   compression state holds it for an intermediary to probe.
public final class HTTP2ConnectionPool: Sendable {
    private enum Connection {
        case empty
        case connecting(EventLoopFuture<HTTP2Connection>)
        case ready(HTTP2Connection)
    }

    private struct Slot {
        var connection: Connection = .empty
        /// Index into `eventLoops`.
        let loop: Int
        var requestsUnderWay = 0
    }

    private let origin: EgressOrigin
    private let eventLoops: [any EventLoop]
    private let streamsPerConnection: Int
    private let maximumConnections: Int
    private let slots: Mutex<[Slot]>
    private let resends = Dictionary(uniqueKeysWithValues: ResendReason.allCases.map {
        ($0, Counter(label: "fleet_relay_fleet_engine_resent_total", dimensions: [("reason", $0.rawValue)]))
    })

    /// Why a request was sent again at once on a new connection: the server certainly had not
    /// processed it. The raw value is the `reason` label of `fleet_relay_fleet_engine_resent_total`.
    enum ResendReason: String, CaseIterable {
        /// Above a GOAWAY's last stream.
        case goaway
        case refusedStream = "refused_stream"
        /// The connection closed before the request was written.
        case notSent = "not_sent"
    }

    /// Connections opened so far and kept (open, being made, or to be made again when needed).
    public var connectionCount: Int { slots.withLock { $0.count } }
    public var connectionLimit: Int { maximumConnections }

    /// - Parameters:
    ///   - streamsPerConnection: streams given one connection at most, below the server's limit.
    ///   - maximumConnections: connections at most (at least one per event loop).
    ///   - offerHTTP1: also offer `http/1.1` by ALPN, so that a server without HTTP/2
    ///     answers with `ExchangeError.http2NotNegotiated` instead of failing TLS.
    public init(host: String, port: Int, egress: Egress, streamsPerConnection: Int = 100, maximumConnections: Int,
                offerHTTP1: Bool, connectTimeout: TimeAmount, requestTimeout: TimeAmount, liveness: HTTP2Liveness = .init(),
                eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) throws {
        var origin = EgressOrigin(host: host, port: port, tls: try egress.tlsContext(alpn: offerHTTP1 ? ["h2", "http/1.1"] : ["h2"]),
                                  proxy: egress.proxy.server(forHost: host), connectTimeout: connectTimeout,
                                  requestTimeout: requestTimeout)
        origin.liveness = liveness
        self.origin = origin
        self.eventLoops = eventLoopGroup.makeIterator().map { $0 }
        self.streamsPerConnection = max(1, streamsPerConnection)
        self.maximumConnections = max(maximumConnections, eventLoops.count, 1)
        self.slots = Mutex(eventLoops.indices.map { Slot(loop: $0) })
    }

    /// Sends `request`, once more on a fresh connection when the first one was closing and
    /// the server certainly did not process it (a GOAWAY or REFUSED_STREAM), so that a
    /// front end draining a connection costs no failed request.
    public func execute(_ request: EgressRequest) async throws -> EgressResponse {
        do {
            return try await executeOnce(request)
        } catch let error as ExchangeError where error.isSafeToRetry {
            let reason: ResendReason = switch error {
            case .refusedByGoAway: .goaway
            case .streamReset: .refusedStream
            default: .notSent
            }
            resends[reason]?.increment()
            return try await executeOnce(request)
        }
    }

    private func executeOnce(_ request: EgressRequest) async throws -> EgressResponse {
        let (index, lease, isNew) = takeLeastBusySlot()
        if isNew, case .connecting(let future) = lease { keep(future, inSlot: index) }
        defer { slots.withLock { $0[index].requestsUnderWay -= 1 } }
        let connection: HTTP2Connection
        switch lease {
        case .ready(let ready): connection = ready
        case .connecting(let future): connection = try await future.get()
        case .empty: preconditionFailure("a lease is never empty")
        }
        // Connecting is not cancelled with the caller (other requests wait for it too).
        try Task.checkCancellation()
        return try await connection.execute(request)
    }

    /// Closes every connection; requests under way fail.
    public func shutdown() async {
        let connections = slots.withLock { slots in
            defer { for index in slots.indices { slots[index].connection = .empty } }
            return slots.map(\.connection)
        }
        for connection in connections {
            switch connection {
            case .ready(let connection): connection.close()
            case .connecting(let future): (try? await future.get())?.close()
            case .empty: break
            }
        }
    }

    /// The slot with the fewest requests under way, among those on the caller's event loop
    /// when it runs on one, or a new slot when that one is at its stream limit; and its
    /// connection or the one being made for it (`isNew` when this call started it).
    private func takeLeastBusySlot() -> (index: Int, lease: Connection, isNew: Bool) {
        let local = eventLoops.firstIndex { $0.inEventLoop }
        return slots.withLock { slots in
            var index = Self.leastBusy(in: slots, on: local)
            if slots[index].requestsUnderWay >= streamLimit(of: slots[index], among: slots), slots.count < maximumConnections {
                slots.append(Slot(loop: local ?? Self.loopWithFewestSlots(slots, loops: eventLoops.count)))
                index = slots.count - 1
            }
            slots[index].requestsUnderWay += 1
            switch slots[index].connection {
            case .ready(let connection) where connection.isUsable:
                return (index, .ready(connection), false)
            case .connecting(let future):
                return (index, .connecting(future), false)
            case .ready, .empty:
                let future = HTTP2Connection.connect(to: origin, on: eventLoops[slots[index].loop])
                slots[index].connection = .connecting(future)
                return (index, .connecting(future), true)
            }
        }
    }

    private static func leastBusy(in slots: [Slot], on loop: Int?) -> Int {
        var best: Int?
        for index in slots.indices where loop == nil || slots[index].loop == loop {
            if best == nil || slots[index].requestsUnderWay < slots[best!].requestsUnderWay { best = index }
        }
        return best ?? 0
    }

    private static func loopWithFewestSlots(_ slots: [Slot], loops: Int) -> Int {
        var counts = Array(repeating: 0, count: loops)
        for slot in slots { counts[slot.loop] += 1 }
        return counts.indices.min { counts[$0] < counts[$1] } ?? 0
    }

    /// Streams a slot's connection may carry: what its server announced, else what another
    /// connection's server announced (the same origin), at most `streamsPerConnection`.
    private func streamLimit(of slot: Slot, among slots: [Slot]) -> Int {
        func announced(_ slot: Slot) -> Int? {
            if case .ready(let connection) = slot.connection, connection.isUsable { connection.streamLimit } else { nil }
        }
        let limit = announced(slot) ?? slots.lazy.compactMap(announced).first ?? streamsPerConnection
        return min(limit, streamsPerConnection)
    }

    /// The slot holds the connection when made, or is emptied when not, so that the next
    /// request tries again. (Registered outside the lock: a completed future calls back at once.)
    private func keep(_ future: EventLoopFuture<HTTP2Connection>, inSlot index: Int) {
        future.whenComplete { [self] result in
            slots.withLock { slots in
                guard case .connecting(let pending) = slots[index].connection, pending === future else { return }
                switch result {
                case .success(let connection): slots[index].connection = .ready(connection)
                case .failure: slots[index].connection = .empty
                }
            }
        }
    }
}
