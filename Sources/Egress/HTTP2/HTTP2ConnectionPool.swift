import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A fixed number of HTTP/2 connections to one origin, at least one per event loop, each
/// request on the one with the fewest requests under way, preferring those on the caller's
/// event loop (a task running there sends and is resumed without a thread hop). A connection is made when first needed and made again
/// when the server sent GOAWAY or it closed; the old one finishes its streams first.
/// A connection that cannot be made fails the requests waiting for it at once, so the
/// caller's backoff, not this pool, decides when to try again.
public final class HTTP2ConnectionPool: Sendable {
    private enum Slot {
        case empty
        case connecting(EventLoopFuture<HTTP2Connection>)
        case ready(HTTP2Connection)
    }

    private struct Slots {
        var slots: [Slot]
        var requestsUnderWay: [Int]
    }

    private let origin: EgressOrigin
    /// Slot `i` connects on `eventLoops[i % eventLoops.count]`.
    private let eventLoops: [any EventLoop]
    private let state: Mutex<Slots>
    public var connectionCount: Int { state.withLock { $0.slots.count } }

    /// - Parameters:
    ///   - connections: how many connections; each carries up to the server's stream limit.
    ///   - offerHTTP1: also offer `http/1.1` by ALPN, so that a server without HTTP/2
    ///     answers with `ExchangeError.http2NotNegotiated` instead of failing TLS.
    public init(host: String, port: Int, egress: Egress, connections: Int, offerHTTP1: Bool,
                connectTimeout: TimeAmount, requestTimeout: TimeAmount,
                eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) throws {
        self.origin = EgressOrigin(host: host, port: port, tls: try egress.tlsContext(alpn: offerHTTP1 ? ["h2", "http/1.1"] : ["h2"]),
                                   proxy: egress.proxy.server(forHost: host), connectTimeout: connectTimeout,
                                   requestTimeout: requestTimeout)
        self.eventLoops = eventLoopGroup.makeIterator().map { $0 }
        let count = max(connections, eventLoops.count, 1)
        self.state = Mutex(Slots(slots: Array(repeating: .empty, count: count), requestsUnderWay: Array(repeating: 0, count: count)))
    }

    /// Sends `request`, once more on a fresh connection when the first one was closing and
    /// the server certainly did not process it (a GOAWAY or REFUSED_STREAM), so that a
    /// front end draining a connection costs no failed request.
    public func execute(_ request: EgressRequest) async throws -> EgressResponse {
        do {
            return try await executeOnce(request)
        } catch let error as ExchangeError where error.isSafeToRetry {
            return try await executeOnce(request)
        }
    }

    private func executeOnce(_ request: EgressRequest) async throws -> EgressResponse {
        let (index, lease, isNew) = takeLeastBusySlot()
        if isNew, case .connecting(let future) = lease { keep(future, inSlot: index) }
        defer { state.withLock { $0.requestsUnderWay[index] -= 1 } }
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
        let slots = state.withLock { state in
            defer { state.slots = state.slots.map { _ in .empty } }
            return state.slots
        }
        for slot in slots {
            switch slot {
            case .ready(let connection): connection.close()
            case .connecting(let future): (try? await future.get())?.close()
            case .empty: break
            }
        }
    }

    /// The slot with the fewest requests under way, among those on the caller's event loop
    /// when it runs on one, and its connection or the one being made for it (`isNew` when
    /// this call started it).
    private func takeLeastBusySlot() -> (index: Int, lease: Slot, isNew: Bool) {
        let local = eventLoops.firstIndex { $0.inEventLoop }
        return state.withLock { state in
            let candidates = state.slots.indices.filter { local == nil || $0 % eventLoops.count == local }
            var index = candidates[0]
            for candidate in candidates where state.requestsUnderWay[candidate] < state.requestsUnderWay[index] {
                index = candidate
            }
            state.requestsUnderWay[index] += 1
            switch state.slots[index] {
            case .ready(let connection) where connection.isUsable:
                return (index, .ready(connection), false)
            case .connecting(let future):
                return (index, .connecting(future), false)
            case .ready, .empty:
                let future = HTTP2Connection.connect(to: origin, on: eventLoops[index % eventLoops.count])
                state.slots[index] = .connecting(future)
                return (index, .connecting(future), true)
            }
        }
    }

    /// The slot holds the connection when made, or is emptied when not, so that the next
    /// request tries again. (Registered outside the lock: a completed future calls back at once.)
    private func keep(_ future: EventLoopFuture<HTTP2Connection>, inSlot index: Int) {
        future.whenComplete { [self] result in
            state.withLock { state in
                guard case .connecting(let pending) = state.slots[index], pending === future else { return }
                switch result {
                case .success(let connection): state.slots[index] = .ready(connection)
                case .failure: state.slots[index] = .empty
                }
            }
        }
    }
}
