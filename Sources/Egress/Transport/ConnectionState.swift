import Synchronization

/// What a pool needs to know about one of its connections from any thread: whether new
/// requests may still start on it. Its channel handler, on the event loop, decides.
final class ConnectionState: Sendable {
    private let usable = Atomic(true)

    var isUsable: Bool { usable.load(ordering: .acquiring) }

    func markUnusable() { usable.store(false, ordering: .releasing) }
}
