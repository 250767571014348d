import Synchronization

/// What a pool needs to know about one of its connections from any thread: whether new
/// requests may still start on it, and how many streams the server allows at once. Its
/// channel handler, on the event loop, publishes both.
final class ConnectionState: Sendable {
    private let usable = Atomic(true)
    private let announcedStreamLimit = Atomic(-1)

    var isUsable: Bool { usable.load(ordering: .acquiring) }

    func markUnusable() { usable.store(false, ordering: .releasing) }

    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS as last announced; nil before its first SETTINGS.
    var streamLimit: Int? {
        let limit = announcedStreamLimit.load(ordering: .relaxed)
        return limit < 0 ? nil : limit
    }

    func announceStreamLimit(_ limit: Int) { announcedStreamLimit.store(max(0, limit), ordering: .relaxed) }
}
