import Kafka

/// The pipeline's books of the assigned partitions: per partition its generation, unfinished
/// offsets, work under way, revoke and share of the pending records; the pause wish; and the
/// commit schedule with its answers. It knows nothing of vehicles or requests: the pipeline
/// tells it which records were taken in, finished, or are being worked on.
///
/// Guarantee: an offset is committable only when every record of its partition at or below it
/// finished, and a commit answer applies only to the generation it was ordered under.
struct PartitionLedger {
    /// A commit without an answer this long after it was ordered counts as failed.
    static var commitAnswerLimit: Duration { PipelineLimits.commitAnswerLimit }

    let commitInterval: Duration
    /// `commitInterval` in nanoseconds: every answer schedules a commit, in `Moment`s.
    private let commitIntervalNanoseconds: Int64
    let maximumPendingRecords: Int
    /// Unfinished records from which a burst (a cold start, a backlog) counts.
    let burstRecords: Int
    private var partitions: [TopicPartition: PartitionProgress] = [:]
    /// The partition `register` found last, and where its books are: a chunk's records come in
    /// runs of one partition, and this spares each record of a run hashing it. Adding or
    /// removing a partition's books forgets it, as the index would no longer hold.
    private var lastRegisteredBooks: (partition: TopicPartition, index: Dictionary<TopicPartition, PartitionProgress>.Index)?
    /// Unfinished records on all partitions, kept up to date rather than summed per event.
    private(set) var unfinishedRecords = 0
    /// When finished offsets are next committed; nil while nothing waits to be committed.
    @StoredAsMoment private var commitDue: ContinuousClock.Instant? = nil
    /// The commit ordered last, while its answer is awaited, and when it counts as failed.
    private var commitUnderWay: (order: CommitOrder, answerBy: Moment)?
    @StoredAsMoment private var lastCommitOrderedAt: ContinuousClock.Instant? = nil
    private var commitOrders: UInt64 = 0
    /// Every partition is to be paused, whatever its share says (records wait for the Schema
    /// Registry; shutdown).
    var pausesEveryPartition = false
    /// Unfinished records reached a burst's size and have not yet fallen to a tenth of it.
    private var burstUnderWay = false
    /// Unfinished records reached a burst's size since every record taken in last finished.
    private var burstSinceCaughtUp = false
    /// When the relay last caught up after a burst: for one commit interval, catching up again
    /// commits at once too (see `caughtUpAfterBurst`).
    @StoredAsMoment private var caughtUpAfterBurstAt: ContinuousClock.Instant? = nil
    /// The pause wish last handed out, and its sequence number.
    private var announcedPauseWish: Set<TopicPartition> = []
    private var pauseWishes: UInt64 = 0
    /// The sequence number of the wish handed out last.
    var lastWishSequence: UInt64 { pauseWishes }
    /// Partitions whose share flipped since the last wish was handed out, and which way.
    private var flips: [TopicPartition: Bool] = [:]

    init(commitInterval: Duration, maximumPendingRecords: Int, burstRecords: Int) {
        self.commitInterval = commitInterval
        self.commitIntervalNanoseconds = commitInterval.nanoseconds
        self.maximumPendingRecords = maximumPendingRecords
        self.burstRecords = burstRecords
    }

    // MARK: Assignment

    /// Partitions taken on under `generation`; one held before starts afresh.
    mutating func assign(_ assigned: [TopicPartition], generation: UInt64) {
        lastRegisteredBooks = nil
        for partition in assigned {
            guard let earlier = partitions.updateValue(PartitionProgress(generation: generation), forKey: partition) else { continue }
            unfinishedRecords -= earlier.unfinishedCount
            earlier.revocation.set()
        }
    }

    /// No new work starts on the partitions; work under way may still finish.
    mutating func beginRevoke(_ revoking: [TopicPartition]) {
        for partition in revoking where partitions[partition] != nil {
            partitions[partition]!.revoking = true
        }
    }

    /// Forgets the partitions; returns their final commit offsets (those not yet committed).
    mutating func finishRevoke(_ revoked: [TopicPartition]) -> [TopicPartitionOffset] {
        lastRegisteredBooks = nil
        return revoked.compactMap { partition -> TopicPartitionOffset? in
            guard let progress = partitions.removeValue(forKey: partition) else { return nil }
            progress.revocation.set()
            unfinishedRecords -= progress.unfinishedCount
            return progress.offsetToCommit.map { TopicPartitionOffset(partition, offset: $0) }
        }
    }

    /// Whether work on the record should go on: its partition is assigned under the same
    /// generation and not being revoked.
    func owns(_ source: RecordSource) -> Bool { ownership.owns(source) }

    /// What `owns` reads, alone: handed to the vehicle scheduler as a closure, it is copied with
    /// one reference retained, where the ledger's own method took a copy of the whole ledger.
    var ownership: PartitionOwnership { PartitionOwnership(partitions: partitions) }

    /// Where the partition's books are, when it is held under `generation`. The hot paths go
    /// through this index: one hash of the partition per call, and no copy of its books.
    private func current(_ partition: TopicPartition, _ generation: UInt64) -> Dictionary<TopicPartition, PartitionProgress>.Index? {
        guard let index = partitions.index(forKey: partition), partitions.values[index].generation == generation else { return nil }
        return index
    }

    // MARK: Records and work

    /// Takes a record in; false when its partition is not ours or it was taken in before.
    mutating func register(_ source: borrowing RecordSource, at now: Moment) -> Bool {
        guard let index = booksForRegistering(source.topicPartition),
              partitions.values[index].register(source.offset, ofGeneration: source.generation, at: now) else { return false }
        unfinishedRecords += 1
        if unfinishedRecords >= burstRecords { burstSinceCaughtUp = true }
        return true
    }

    /// `register`, counting a record taken in for its partition.
    mutating func register(_ source: borrowing RecordSource, at now: Moment, counting counts: inout CountsByPartition) -> Bool {
        guard register(source, at: now) else { return false }
        counts.count(source.topicPartition)
        return true
    }

    private mutating func booksForRegistering(_ partition: TopicPartition) -> Dictionary<TopicPartition, PartitionProgress>.Index? {
        if let lastRegisteredBooks, lastRegisteredBooks.partition == partition { return lastRegisteredBooks.index }
        guard let index = partitions.index(forKey: partition) else { return nil }
        lastRegisteredBooks = (partition, index)
        return index
    }

    /// The record finished; false when its partition's current generation is not the record's.
    @discardableResult
    mutating func finish(_ source: borrowing RecordSource) -> Bool {
        guard let books = current(source.topicPartition, source.generation) else { return false }
        if partitions.values[books].finish(source.offset) { unfinishedRecords -= 1 }
        return true
    }

    /// A request's records finished together; false when none was of a partition's current
    /// generation. Their partitions' books are looked up once per run of records sharing
    /// partition and generation (a request's records nearly always do).
    mutating func finish(_ request: CoalescedRequest) -> Bool {
        var anyFinished = false
        var run: (partition: Int, books: Dictionary<TopicPartition, PartitionProgress>.Index?)?
        request.forEachRecordOffset { partition, offset in
            if run?.partition != partition {
                let site = request.partitions[partition]
                run = (partition, current(site.topicPartition, site.generation))
            }
            guard let books = run?.books else { return }
            anyFinished = true
            if partitions.values[books].finish(offset) { unfinishedRecords -= 1 }
        }
        return anyFinished
    }

    /// Work that settles records of these partitions began (a request, a dead-letter write);
    /// returns what tells it when their generation ended.
    @discardableResult
    mutating func beginWork(on sites: ShortList<PartitionGeneration>) -> ShortList<Revocation> {
        var revocations = ShortList<Revocation>()
        for site in sites {
            guard let index = current(site.topicPartition, site.generation) else { continue }
            partitions.values[index].workUnderWay += 1
            revocations.append(partitions.values[index].revocation)
        }
        return revocations
    }

    /// Work on these partitions ended; true when some partition has none left (a revoke waiting may go on).
    mutating func endWork(on sites: ShortList<PartitionGeneration>) -> Bool {
        var idle = false
        for site in sites {
            guard let index = current(site.topicPartition, site.generation) else { continue }
            partitions.values[index].workUnderWay -= 1
            if partitions.values[index].workUnderWay == 0 { idle = true }
        }
        return idle
    }

    func workUnderWay(in partitions: [TopicPartition]) -> Int {
        partitions.reduce(0) { $0 + (self.partitions[$1]?.workUnderWay ?? 0) }
    }

    /// A burst begins at `burstRecords` unfinished records and has drained once a tenth of
    /// that is left: true once when it has, so that the memory it took can go back to the system.
    mutating func burstDrained() -> Bool {
        if !burstUnderWay, unfinishedRecords >= burstRecords {
            burstUnderWay = true
        } else if burstUnderWay, unfinishedRecords <= burstRecords / 10 {
            burstUnderWay = false
            return true
        }
        return false
    }

    // MARK: Pausing

    /// Unfinished records per partition at which its fetching pauses: an equal share of the bound.
    var share: Int { max(1, maximumPendingRecords / max(1, partitions.count)) }

    /// Whether some partition holds its share (fetching waits for records to finish).
    var anyPartitionAtItsShare: Bool { partitions.values.contains(where: \.paused) }

    /// Every partition while `pausesEveryPartition`; otherwise those holding their share.
    var pauseWish: Set<TopicPartition> {
        pausesEveryPartition ? Set(partitions.keys) : Set(partitions.filter(\.value.paused).keys)
    }

    /// Pauses a partition holding its share of unfinished records, and resumes it once half
    /// of that finished. Unfinished records are counted, not the window behind the oldest,
    /// so a vehicle stuck in retries holds back only its own partition. A flip is noted for
    /// the next `pauseChange`.
    mutating func updateShare(_ partition: TopicPartition) {
        guard let index = partitions.index(forKey: partition) else { return }
        let unfinished = partitions.values[index].unfinishedCount
        let paused = partitions.values[index].paused
        if !paused, unfinished >= share {
            partitions.values[index].paused = true
            flips[partition] = true
        } else if paused, unfinished <= share / 2 {
            partitions.values[index].paused = false
            flips[partition] = false
        }
    }

    /// Every partition's share checked again (the assignment changed, so the share did).
    mutating func updateEveryShare() {
        for partition in partitions.keys { updateShare(partition) }
    }

    /// The wish, numbered, when a share flipped and the wish differs from the last one handed
    /// out, or `always` (after an assignment change, or a change of `pausesEveryPartition`: a
    /// revoked partition's pause must never linger in the consumer's wish).
    mutating func pauseChange(always: Bool, recordsWait: Bool) -> PauseChange? {
        // Most events flip no share: the wish is built only when one did.
        guard always || !flips.isEmpty else { return nil }
        defer { flips = [:] }
        let wish = pauseWish
        guard always || wish != announcedPauseWish else { return nil }
        announcedPauseWish = wish
        pauseWishes += 1
        return PauseChange(wish: wish, sequence: pauseWishes,
                           pausing: flips.filter { $0.value && wish.contains($0.key) }.keys.sorted(),
                           resuming: flips.filter { !$0.value && !wish.contains($0.key) }.keys.sorted(),
                           share: share, recordsWait: recordsWait)
    }

    // MARK: Commits

    /// Offsets that advanced since the last commit, by partition.
    func offsetsToCommit() -> [TopicPartitionOffset] {
        partitions.compactMap { partition, progress in
            progress.offsetToCommit.map { TopicPartitionOffset(partition, offset: $0) }
        }.sorted { $0.topicPartition < $1.topicPartition }
    }

    /// What finished on partitions being revoked, to commit before the revoke waits for the
    /// work under way: a member dropped from the group while it waits cannot commit any more.
    func offsetsToCommit(revoking revoked: [TopicPartition]) -> [TopicPartitionOffset] {
        revoked.compactMap { partition in
            partitions[partition].flatMap { $0.revoking ? $0.offsetToCommit : nil }
                .map { TopicPartitionOffset(partition, offset: $0) }
        }
    }

    /// A commit inside the revoke succeeded: the final commit then carries only what finished since.
    mutating func committedDuringRevoke(_ offsets: [TopicPartitionOffset]) {
        for entry in offsets where partitions[entry.topicPartition]?.revoking == true {
            partitions[entry.topicPartition]!.recordCommitted(entry.offset)
        }
    }

    /// Something finished: a commit is due one interval after the last one was ordered (at once
    /// when that is past, or when the relay caught up after a burst), unless one is due sooner
    /// already. Returns the due time when the timer must hear of it (no commit awaits its answer).
    mutating func scheduleCommit(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        scheduleCommit(at: Moment(now))?.instant
    }

    /// `scheduleCommit` in `Moment`s, as the times are stored: each request's answer comes
    /// here, and turning stored moments into instants and back took 128-bit arithmetic each.
    private mutating func scheduleCommit(at now: Moment) -> Moment? {
        let caughtUp = caughtUpAfterBurst(at: now)
        let due = caughtUp ? now : $lastCommitOrderedAt.map { max(now, $0.advanced(byNanoseconds: commitIntervalNanoseconds)) } ?? now
        if caughtUp, burstSinceCaughtUp { $caughtUpAfterBurstAt = now }
        if unfinishedRecords == 0 { burstSinceCaughtUp = false }
        if let scheduled = $commitDue, scheduled <= due { return nil }
        $commitDue = due
        return commitUnderWay == nil ? due : nil
    }

    /// Every record taken in finished, after a burst's worth of them was unfinished at once or
    /// with a burst's worth waiting for a commit: a backlog or a cold start was just worked off.
    /// Committed at once rather than at the interval, the group's lag shows the relay caught up
    /// as soon as it did, and a restart then replays none of it. The steady state rarely holds
    /// a burst's worth, so it keeps committing at the interval.
    /// - The burst counts even when an interval's commit took most of it meanwhile.
    /// - For one interval after catching up so, catching up again counts too: the relay may work
    ///   off what fetching delivered before the backlog's tail arrived, and that tail, less than a
    ///   burst, would otherwise wait up to a whole interval after the relay caught up for good.
    private func caughtUpAfterBurst(at now: Moment) -> Bool {
        guard unfinishedRecords == 0 else { return false }
        if burstSinceCaughtUp || uncommittedRecords >= Int64(burstRecords) { return true }
        return $caughtUpAfterBurstAt.map { now < $0.advanced(byNanoseconds: commitIntervalNanoseconds) } ?? false
    }

    /// Orders a commit when one is due and none is awaited; a commit unanswered for
    /// `commitAnswerLimit` counts as failed (returned as `failure`, and it is scheduled again),
    /// so a lost answer never stops committing.
    mutating func commitIfDue(now: ContinuousClock.Instant) -> (order: CommitOrder?, failure: String?) {
        var failure: String?
        if let underWay = commitUnderWay, now >= underWay.answerBy.instant {
            commitUnderWay = nil
            failure = "no answer within \(Int(Self.commitAnswerLimit.inSeconds.rounded())) s"
            _ = scheduleCommit(now: now)
        }
        guard let due = commitDue, now >= due, commitUnderWay == nil else { return (nil, failure) }
        commitDue = nil
        // A partition being revoked commits in its revoke, with what finished by then.
        let offsets = offsetsToCommit().filter { partitions[$0.topicPartition]?.revoking == false }
        guard !offsets.isEmpty else { return (nil, failure) }
        commitOrders += 1
        let order = CommitOrder(id: commitOrders, offsets: offsets,
                                generations: Dictionary(uniqueKeysWithValues: offsets.map {
                                    ($0.topicPartition, partitions[$0.topicPartition]!.generation)
                                }))
        lastCommitOrderedAt = now
        commitUnderWay = (order, Moment(now + Self.commitAnswerLimit))
        return (order, failure)
    }

    /// The broker answered a commit (`failure` nil: committed). Only partitions still assigned
    /// under the generation the order was made in learn the offset: an answer for a partition
    /// revoked or reassigned since says nothing about its current owner's position. Returns the
    /// due time of the next commit when the timer must hear of it.
    mutating func commitAnswered(_ order: CommitOrder, failure: String?, now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        var wake: ContinuousClock.Instant?
        if commitUnderWay?.order.id == order.id {
            commitUnderWay = nil
            wake = commitDue
        }
        if failure == nil {
            for entry in order.offsets where partitions[entry.topicPartition]?.generation == order.generations[entry.topicPartition] {
                partitions[entry.topicPartition]!.recordCommitted(entry.offset)
            }
        }
        if !offsetsToCommit().isEmpty, let due = scheduleCommit(now: now) { wake = due }
        return wake
    }

    /// The next moment the commit schedule needs the timer: the answer limit of the commit under
    /// way (the next one waits for that answer), else the next commit's due time.
    var nextDeadline: ContinuousClock.Instant? { commitUnderWay?.answerBy.instant ?? commitDue }

    // MARK: Observation

    var assignedPartitions: [TopicPartition] { partitions.keys.sorted() }
    var partitionCount: Int { partitions.count }
    var unfinishedPerPartition: [TopicPartition: Int] { partitions.mapValues(\.unfinishedCount) }
    var uncommittedRecords: Int64 { partitions.values.reduce(0) { $0 + $1.uncommitted } }
    var lastCommittedOffsets: [TopicPartition: Int64] { partitions.compactMapValues(\.lastCommitted) }

    func oldestUnfinishedAge(now: ContinuousClock.Instant) -> [TopicPartition: Duration] {
        partitions.mapValues { $0.oldestUnfinishedAge(now: now) }
    }
}

/// Which partitions the pipeline owns, under which generations: a view of the ledger's books
/// for deciding whether work on a record should go on.
struct PartitionOwnership {
    fileprivate let partitions: [TopicPartition: PartitionProgress]

    /// Its partition is assigned under the record's generation and not being revoked. Read
    /// through the index: the dictionary's getter copies the partition's books.
    func owns(_ source: RecordSource) -> Bool {
        guard let index = partitions.index(forKey: source.topicPartition) else { return false }
        return partitions.values[index].owns(generation: source.generation)
    }
}
