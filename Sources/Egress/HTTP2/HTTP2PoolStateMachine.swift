/// A connection as the pool's decisions see it: whether new requests may still start on it,
/// and the stream limit its server last announced.
protocol PooledConnection: AnyObject {
    var isUsable: Bool { get }
    /// SETTINGS_MAX_CONCURRENT_STREAMS as last announced; nil before the server's first SETTINGS.
    var streamLimit: Int? { get }
}

/// The decisions of `HTTP2ConnectionPool`, without a socket: which connection a request goes
/// to, when a connection is opened and on which event loop, when a connection being made or
/// dead is replaced. The pool performs what it decides (connects, sends) and reports back
/// what happened; tests drive it with stand-in connections.
///
/// - Every event loop has a slot from the start; a request takes the slot with the fewest
///   requests under way on the caller's loop (any loop when the caller runs on none).
/// - When that slot carries as many requests as its server allows (at most
///   `streamsPerConnection`), a new slot is added on the caller's loop, or on the loop with the
///   fewest slots, up to `maximumConnections`; beyond that, requests share the busiest ones.
/// - A slot connects when a request finds it empty or its connection unusable (GOAWAY, closed,
///   silent, idle); the old connection finishes its streams by itself.
/// - A failed connect empties the slot, so the next request tries again; the requests that
///   waited for it fail with it, and their callers' backoff decides when.
struct HTTP2PoolStateMachine<Connection: PooledConnection, Connecting: AnyObject> {
    enum SlotConnection {
        case empty
        case connecting(Connecting)
        case ready(Connection)
    }

    struct Slot {
        var connection: SlotConnection = .empty
        /// Index of the event loop the slot's connections live on.
        let loop: Int
        var requestsUnderWay = 0
    }

    /// What the pool does for a request that was given a slot.
    enum LeaseAction {
        case send(on: Connection)
        case awaitConnecting(Connecting)
        /// Open a connection on `loop` and report it with `startedConnecting`.
        case connect(onLoop: Int)
    }

    struct Lease {
        let slot: Int
        let action: LeaseAction
    }

    private(set) var slots: [Slot]
    let streamsPerConnection: Int
    let maximumConnections: Int
    private let loopCount: Int

    init(loopCount: Int, streamsPerConnection: Int, maximumConnections: Int) {
        self.loopCount = max(1, loopCount)
        self.streamsPerConnection = max(1, streamsPerConnection)
        self.maximumConnections = max(maximumConnections, self.loopCount)
        self.slots = (0..<self.loopCount).map { Slot(loop: $0) }
    }

    /// A slot for one request, counted as under way there until `released`.
    mutating func lease(callerLoop: Int?) -> Lease {
        var index = leastBusy(on: callerLoop)
        if slots[index].requestsUnderWay >= streamLimit(of: slots[index]), slots.count < maximumConnections {
            slots.append(Slot(loop: callerLoop ?? loopWithFewestSlots()))
            index = slots.count - 1
        }
        slots[index].requestsUnderWay += 1
        switch slots[index].connection {
        case .ready(let connection) where connection.isUsable:
            return Lease(slot: index, action: .send(on: connection))
        case .connecting(let pending):
            return Lease(slot: index, action: .awaitConnecting(pending))
        case .ready, .empty:
            return Lease(slot: index, action: .connect(onLoop: slots[index].loop))
        }
    }

    /// The connect a `.connect` lease asked for is under way: later requests to the slot wait for it.
    mutating func startedConnecting(_ pending: Connecting, inSlot slot: Int) {
        slots[slot].connection = .connecting(pending)
    }

    /// A connect finished. A result for an attempt the slot no longer waits for is ignored.
    mutating func finishedConnecting(_ pending: Connecting, inSlot slot: Int, with connection: Connection?) {
        guard case .connecting(let awaited) = slots[slot].connection, awaited === pending else { return }
        slots[slot].connection = connection.map { .ready($0) } ?? .empty
    }

    mutating func released(slot: Int) {
        slots[slot].requestsUnderWay -= 1
    }

    /// Every slot emptied; what they held, for the pool to close.
    mutating func shutDown() -> [SlotConnection] {
        defer { for index in slots.indices { slots[index].connection = .empty } }
        return slots.map(\.connection)
    }

    private func leastBusy(on loop: Int?) -> Int {
        var best: Int?
        for index in slots.indices where loop == nil || slots[index].loop == loop {
            if best.map({ slots[index].requestsUnderWay < slots[$0].requestsUnderWay }) ?? true { best = index }
        }
        return best ?? 0
    }

    private func loopWithFewestSlots() -> Int {
        var counts = Array(repeating: 0, count: loopCount)
        for slot in slots { counts[slot.loop] += 1 }
        return counts.indices.min { counts[$0] < counts[$1] } ?? 0
    }

    /// Streams a slot's connection may carry: what its server announced, else what another
    /// connection's server announced (the same origin), at most `streamsPerConnection`.
    private func streamLimit(of slot: Slot) -> Int {
        func announced(_ slot: Slot) -> Int? {
            if case .ready(let connection) = slot.connection, connection.isUsable { connection.streamLimit } else { nil }
        }
        let limit = announced(slot) ?? slots.lazy.compactMap(announced).first ?? streamsPerConnection
        return min(limit, streamsPerConnection)
    }
}
