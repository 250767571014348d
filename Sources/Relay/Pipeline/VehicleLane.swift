import FleetAuth

/// One vehicle as the pipeline sees it: fixes waiting to be sent, whether a
/// request is under way or scheduled, and what Fleet Engine is known to hold.
struct VehicleLane {
    enum Schedule: Equatable {
        /// Nothing to send, or a request under way.
        case idle
        /// In the ready queue, waiting for a worker.
        case ready
        /// Waiting until its due time: a minimum interval or a retry backoff.
        case deferred(until: ContinuousClock.Instant)
    }

    /// Fixes not yet sent, in consumption order.
    var queued: [PendingFix] = []
    /// An attempt of the vehicle is under way.
    var inFlight = false
    var schedule = Schedule.idle
    /// When the vehicle's last request to Fleet Engine ended: `--min-interval-per-vehicle`
    /// counts from here, so Fleet Engine sees its requests at least that far apart however
    /// long one took (minting a token and reading the live location come before the update).
    var lastRequestEndedAt: ContinuousClock.Instant?
    /// The newest location time Fleet Engine is known to hold for the vehicle.
    var newestKnownMilliseconds: Int64?
    /// The assignment epoch in which Fleet Engine's live location was last taken into account.
    var verifiedEpoch: UInt64?
    /// Consecutive attempts that failed transiently, since when, and whether Fleet Engine
    /// (rather than the signer) failed the last one; nil while attempts succeed.
    struct Retry {
        var attempts: Int
        var since: ContinuousClock.Instant
        var fleetEngine: Bool
    }

    var retry: Retry?
    /// When the lane last took in a fix or finished a request.
    var lastActive: ContinuousClock.Instant

    init(now: ContinuousClock.Instant) {
        self.lastActive = now
    }

    /// Nothing queued, under way or scheduled: the lane holds only what it remembers.
    var isIdle: Bool { queued.isEmpty && !inFlight && schedule == .idle }

    /// May join the ready queue now: it has fixes, nothing under way and nothing scheduled.
    var wantsScheduling: Bool { !queued.isEmpty && !inFlight && schedule == .idle }

    mutating func learn(newestKnownMilliseconds newest: Int64?) {
        guard let newest else { return }
        newestKnownMilliseconds = max(newestKnownMilliseconds ?? .min, newest)
    }
}
