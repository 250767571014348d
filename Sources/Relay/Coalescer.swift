import FleetAuth
import FleetEngine

/// One request's worth of a vehicle's fixes.
public struct CoalescedRequest: Sendable {
    public let update: VehicleLocationUpdate
    /// The record sent as `lastLocation`.
    public let newest: PendingFix
    /// Records sent in `pastLocations`, plus the oldest ones beyond its cap: all
    /// settled with the request's outcome.
    public let carried: [PendingFix]
    /// Set when Fleet Engine's live location must be read first (first request for the
    /// vehicle since startup or a partition reassignment): the assignment epoch checked.
    public internal(set) var liveCheckEpoch: UInt64?
    /// Earlier attempts that found no token for the vehicle (the signer failing), and
    /// since when: drives the backoff before the next try and the retry deadline.
    public internal(set) var tokenAttempts = 0
    public internal(set) var awaitingTokenSince: ContinuousClock.Instant?

    /// Every record the request settles, computed once: it is read several times per request.
    public let sources: [RecordSource]

    init(update: VehicleLocationUpdate, newest: PendingFix, carried: [PendingFix]) {
        self.update = update
        self.newest = newest
        self.carried = carried
        self.sources = [newest.source] + carried.map(\.source)
    }
}

/// Turns a vehicle's queued fixes into one request: the newest as `lastLocation`,
/// older ones (oldest first, at most `pastLimit`) as `pastLocations`. Fixes not
/// newer than the newest one Fleet Engine accepted are stale and never sent, so
/// the vehicle never moves backwards.
public enum Coalescer {
    public static let defaultPastLimit = 100

    public static func coalesce(
        vehicle: VehicleIdentity, fixes: [PendingFix], newestAcceptedMilliseconds: Int64?, pastLimit: Int
    ) -> (request: CoalescedRequest?, stale: [PendingFix]) {
        let floor = newestAcceptedMilliseconds ?? .min
        // Stable sort: among equal times the later-consumed fix is the newer.
        let ordered = fixes.enumerated().sorted {
            ($0.element.update.fix.recordedAtMilliseconds, $0.offset) < ($1.element.update.fix.recordedAtMilliseconds, $1.offset)
        }.map(\.element)
        let stale = ordered.filter { $0.update.fix.recordedAtMilliseconds <= floor }
        let fresh = ordered.filter { $0.update.fix.recordedAtMilliseconds > floor }
        guard let newest = fresh.last else { return (nil, stale) }
        let older = fresh.dropLast()
        let past = older.suffix(pastLimit)
        let update = VehicleLocationUpdate(vehicle: vehicle, lastLocation: newest.update.fix,
                                           pastLocations: past.map(\.update.fix))
        return (CoalescedRequest(update: update, newest: newest, carried: Array(older)), stale)
    }
}
