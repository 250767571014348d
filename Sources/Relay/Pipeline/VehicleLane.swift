import FleetAuth

/// One vehicle as the pipeline sees it: fixes waiting to be sent, whether a
/// request is under way or scheduled, and what Fleet Engine is known to hold.
///
/// The relay keeps one per active vehicle (100,000 and more), so it is laid out small:
/// moments take 8 bytes (`Moment`), not an instant's 16, and a deferred lane's due time
/// lives only in the pipeline's heap.
struct VehicleLane {
    enum Schedule: UInt8 {
        /// Nothing to send, or a request under way.
        case idle
        /// In the ready queue, waiting for a worker.
        case ready
        /// Waiting in the pipeline's heap until its due time (a minimum interval or a retry
        /// backoff); a deferred lane has exactly one entry there.
        case deferred
    }

    /// Consecutive attempts that failed transiently, since when, and whether Fleet Engine
    /// (rather than the signer) failed the last one.
    struct Retry {
        var attempts: Int32
        var fleetEngine: Bool
        private var sinceMoment: Moment

        init(attempts: Int, since: ContinuousClock.Instant, fleetEngine: Bool) {
            self.attempts = Int32(clamping: attempts)
            self.fleetEngine = fleetEngine
            self.sinceMoment = Moment(since)
        }

        var since: ContinuousClock.Instant { sinceMoment.instant }
    }

    /// Fixes not yet sent, in consumption order.
    var queued: [PendingFix] = []
    private var lastActiveMoment: Moment
    /// The assignment epoch in which Fleet Engine's live location was last taken into account;
    /// 0: never (epochs start at 1 with the first assignment).
    var verifiedEpoch: UInt64 = 0
    /// The newest location time Fleet Engine is known to hold for the vehicle.
    var newestKnownMilliseconds: Int64?
    /// An attempt of the vehicle is under way.
    var inFlight = false
    var schedule = Schedule.idle
    private var lastRequestEndedMoment: Moment?
    /// Set while attempts fail; nil while they succeed.
    var retry: Retry?

    init(now: ContinuousClock.Instant) {
        self.lastActiveMoment = Moment(now)
    }

    /// Queues a fix the lane took in at `moment`.
    mutating func takeIn(_ fix: consuming PendingFix, at moment: Moment) {
        queued.append(fix)
        lastActiveMoment = moment
    }

    /// When the lane last took in a fix or finished a request.
    var lastActive: ContinuousClock.Instant {
        get { lastActiveMoment.instant }
        set { lastActiveMoment = Moment(newValue) }
    }

    /// When the vehicle's last request to Fleet Engine ended: `--min-interval-per-vehicle`
    /// counts from here, so Fleet Engine sees its requests at least that far apart however
    /// long one took (minting a token and reading the live location come before the update).
    var lastRequestEndedAt: ContinuousClock.Instant? {
        get { lastRequestEndedMoment?.instant }
        set { lastRequestEndedMoment = newValue.map(Moment.init) }
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
