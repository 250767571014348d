/// The bounds and pacing `PipelineState` works within.
public struct PipelineLimits: Sendable {
    public static let defaultVehicleIdleLimit = Duration.seconds(300)
    public static let defaultMaximumPendingRecords = 50_000
    public static let defaultCommitInterval = Duration.seconds(1)
    /// A commit without an answer this long after it was ordered counts as failed.
    public static let commitAnswerLimit = Duration.seconds(10)

    public var pastLocations: Int
    public var minimumInterval: Duration
    public var vehicleIdleLimit: Duration
    public var maximumPendingRecords: Int
    /// The backoff of a vehicle whose attempt failed transiently.
    public var retryPolicy: RetryPolicy
    /// How long a vehicle's attempts may keep failing before its records are dead-lettered;
    /// nil: for as long as the process runs.
    public var retryDeadline: Duration?
    /// Time between commits: finished offsets are committed at most this often.
    public var commitInterval: Duration
    /// A vehicle waits until it has a full request's worth of fixes (`pastLocations` + 1)
    /// before it is sent, until the input ends or flow control pauses fetching: a replay's
    /// history goes out in as few requests as it fits in.
    public var holdsPartialRequests = false
    /// Fleet Engine's live location is read before every request, not only a vehicle's first
    /// after an assignment: a replay runs beside a live relay that moves vehicles on meanwhile.
    public var readsLiveLocationBeforeEveryRequest = false
    /// Attempts under way at most, adapted to what Fleet Engine sustains; nil: as many as workers ask.
    public var concurrency: ConcurrencyLimit.Settings?
    /// Requests per second (live-location reads and updates) at most; nil: no ceiling.
    public var maximumRequestsPerSecond: Double?
    /// How the rate Fleet Engine admits is learnt from its 429s; nil: 429s are only retried.
    public var learnedRate: LearnedRate.Settings? = LearnedRate.Settings()
    /// False: there is no dead-letter topic (a replay's `--no-dead-letter`). Records it would
    /// take stay unfinished, and so uncommitted, for a resumed run to try again.
    public var writesDeadLetters = true

    /// Unfinished records from which the pipeline counts a burst: a fifth of the bound, at
    /// least 1,000. The warm steady state holds far fewer (the records of a fetch round).
    public var burstRecords: Int { max(1_000, maximumPendingRecords / 5) }

    public init(pastLocations: Int = Coalescer.defaultPastLimit, minimumInterval: Duration = .zero,
                vehicleIdleLimit: Duration = defaultVehicleIdleLimit,
                maximumPendingRecords: Int = defaultMaximumPendingRecords,
                retryPolicy: RetryPolicy = RetryPolicy(), retryDeadline: Duration? = nil,
                commitInterval: Duration = defaultCommitInterval) {
        self.commitInterval = commitInterval
        self.pastLocations = pastLocations
        self.minimumInterval = minimumInterval
        self.vehicleIdleLimit = vehicleIdleLimit
        self.maximumPendingRecords = maximumPendingRecords
        self.retryPolicy = retryPolicy
        self.retryDeadline = retryDeadline
    }
}
