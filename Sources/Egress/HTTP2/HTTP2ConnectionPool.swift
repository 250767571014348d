import Metrics
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// HTTP/2 connections to one origin, as many as the server's stream limit needs, each request
/// on the least busy one on the caller's event loop (a task running there sends and is resumed
/// without a thread hop). `HTTP2PoolStateMachine` decides which connection and when to open one;
/// this class connects, sends, and resends once what a closing connection certainly did not
/// process. A connection that cannot be made fails the requests waiting for it at once, so the
/// caller's backoff, not this pool, decides when to try again.
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
    private typealias StateMachine = HTTP2PoolStateMachine<HTTP2Connection, EventLoopFuture<HTTP2Connection>>

    private let origin: EgressOrigin
    private let eventLoops: [any EventLoop]
    private let state: Mutex<StateMachine>
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
    public var connectionCount: Int { state.withLock { $0.slots.count } }
    public let connectionLimit: Int

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
        let machine = StateMachine(loopCount: eventLoops.count, streamsPerConnection: streamsPerConnection,
                                   maximumConnections: maximumConnections)
        self.connectionLimit = machine.maximumConnections
        self.state = Mutex(machine)
    }

    /// Sends `request`, once more on a fresh connection when the first one was closing and
    /// the server certainly did not process it (a GOAWAY or REFUSED_STREAM), so that a
    /// front end draining a connection costs no failed request.
    /// - Parameter resendsOnce: false when the request was already sent once and not processed
    ///   (through `start`): this is its resend.
    public func execute(_ request: EgressRequest, resendsOnce: Bool = true) async throws -> EgressResponse {
        do {
            return try await executeOnce(request)
        } catch let error as ExchangeError where error.isSafeToRetry && resendsOnce {
            resends[error.resendReason]?.increment()
            return try await executeOnce(request)
        }
    }

    /// Starts `request` at once on a ready connection of the caller's event loop, where
    /// `receiver` then hears its end, once; nil when there is none (a connection to open or wait
    /// for, or only other loops' free): the caller awaits `execute` instead. An exchange the server
    /// certainly did not process ends in an `ExchangeError` that `isSafeToRetry`: counted here as
    /// a resend, for the caller to send again through `execute(_:resendsOnce: false)`.
    public func start(_ request: EgressRequest, answerTo receiver: some EgressAnswerReceiver) -> EgressCall? {
        let (slot, leased) = lease()
        guard case .send(let connection) = leased, connection.isLocal else {
            state.withLock { $0.released(slot: slot) }
            return nil
        }
        let exchange = connection.start(request, completion: .pooled(.init(pool: self, slot: slot, receiver: receiver)))
        return EgressCall(connection: connection, exchange: exchange)
    }

    /// A request `start` started ended: its slot is free again before its receiver hears it,
    /// which may start the next request at once.
    func ended(slot: Int, with result: Result<EgressResponse, any Error>, answering receiver: any EgressAnswerReceiver) {
        state.withLock { $0.released(slot: slot) }
        if case .failure(let error as ExchangeError) = result, error.isSafeToRetry { resends[error.resendReason]?.increment() }
        receiver.received(result)
    }

    private func executeOnce(_ request: EgressRequest) async throws -> EgressResponse {
        let (slot, connecting) = lease()
        defer { state.withLock { $0.released(slot: slot) } }
        let connection: HTTP2Connection
        switch connecting {
        case .send(let ready): connection = ready
        case .awaitConnecting(let future): connection = try await future.get()
        case .connect: preconditionFailure("a lease that connects awaits the connect it started")
        }
        // Connecting is not cancelled with the caller (other requests wait for it too).
        try Task.checkCancellation()
        return try await connection.execute(request)
    }

    /// Closes every connection; requests under way fail.
    public func shutdown() async {
        for connection in state.withLock({ $0.shutDown() }) {
            switch connection {
            case .ready(let connection): connection.close()
            case .connecting(let future): (try? await future.get())?.close()
            case .empty: break
            }
        }
    }

    /// The state machine's slot for one request, and the connection to send on or to wait for.
    /// A connect it asks for is registered under the lock, as a promise, so that the requests
    /// after this one wait for it too; the connect itself starts after the lock, which guards
    /// the state machine alone: NIO's bootstrap, on the caller's own loop, runs channel setup
    /// at once, and no code of another library runs while the pool's lock is held.
    private func lease() -> (slot: Int, StateMachine.LeaseAction) {
        let callerLoop = eventLoops.firstIndex { $0.inEventLoop }
        let (lease, connecting) = state.withLock { machine -> (StateMachine.Lease, (loop: Int, EventLoopPromise<HTTP2Connection>)?) in
            let lease = machine.lease(callerLoop: callerLoop)
            guard case .connect(let loop) = lease.action else { return (lease, nil) }
            let promise = eventLoops[loop].makePromise(of: HTTP2Connection.self)
            machine.startedConnecting(promise.futureResult, inSlot: lease.slot)
            return (lease, (loop, promise))
        }
        guard let (loop, promise) = connecting else { return (lease.slot, lease.action) }
        let (slot, started) = (lease.slot, promise.futureResult)
        started.whenComplete { [self] result in
            state.withLock { $0.finishedConnecting(started, inSlot: slot, with: try? result.get()) }
        }
        HTTP2Connection.connect(to: origin, on: eventLoops[loop]).cascade(to: promise)
        return (slot, .awaitConnecting(started))
    }
}

extension HTTP2Connection: PooledConnection {}

/// A request `HTTP2ConnectionPool.start` started, for its caller to cancel from the same event loop.
public struct EgressCall: @unchecked Sendable {  // used only on the connection's event loop
    fileprivate let connection: HTTP2Connection
    fileprivate let exchange: Exchange

    /// Ends the request: its completion hears a `CancellationError` (unless it ended already).
    public func cancel() {
        connection.cancel(exchange)
    }
}

extension ExchangeError {
    /// Why a request the server did not process is sent again, as the resend counter names it.
    fileprivate var resendReason: HTTP2ConnectionPool.ResendReason {
        switch self {
        case .refusedByGoAway: .goaway
        case .streamReset: .refusedStream
        default: .notSent
        }
    }
}
