import FleetEngine
import FleetModel
import FleetSimulator
import Foundation
import InputFormats
import Kafka
@testable import Relay
import Testing

/// `PipelineState` under random steps, with its promises checked after every step, not only
/// at the end: a bug that finishes records early and reaches the same end state still fails.
///
/// Steps: records (fixes, bad, skipped) consumed, workers asking for work, every outcome
/// (accepted, rejected, retry on a signer or Fleet Engine failure, stale, abandoned), live
/// checks that find Fleet Engine newer, dead letters written or failing (ordered again after
/// their backoff), time passing to the deadlines,
/// commits answered or refused, partitions revoked with work under way and assigned again.
///
/// After every step:
/// - no committable or committed offset passes a record known unfinished (in a request, held
///   for its retry, or waiting for its dead letter), and a committed offset never moves back;
/// - no request carries a fix at or before one its vehicle had accepted (never backwards);
/// - no record is in two requests at once, nor in one after it finished;
/// - the pause wish holds every partition while records wait to be taken in; otherwise every
///   partition with at least its share of records the model knows unfinished, and none with at
///   most half of it consumed and not known finished; the wish announced is the state's.
/// The model answers for itself which records are owned and how many are unfinished: it asks
/// the state only for what it checks.
/// At the end, with everything drained: every record of a partition still assigned is
/// committed, and each ended exactly once.
///
/// Many seeds run within a time bound. A failure prints its seed and the shortest step list
/// found that still fails.
@Suite struct PipelinePropertyTests {
    @Test func everyInvariantHoldsAfterEveryStep() throws {
        let started = ContinuousClock.now
        var seed: UInt64 = 1
        while seed <= 400, ContinuousClock.now - started < .seconds(20) {
            let steps = PipelineModel.steps(seed: seed, count: 300)
            if let failure = PipelineModel.run(steps) {
                let shortest = PipelineModel.shrink(steps)
                Issue.record("""
                    seed \(seed): \(failure)
                    shortest failing steps (\(shortest.count)): \(shortest.map(\.description).joined(separator: ", "))
                    which fail with: \(PipelineModel.run(shortest) ?? "?")
                    """)
                return
            }
            seed += 1
        }
        #expect(seed > 50, "at least 50 seeds ran within the time bound (\(seed - 1))")
    }
}

/// One step of the property test. Indices pick among what exists at that moment (modulo its
/// count), so that any subsequence of steps is still a valid run, which shrinking needs.
enum PipelineStep: CustomStringConvertible {
    case fix(vehicle: Int, time: Int64)
    case bad(partition: Int)
    case skipped(partition: Int)
    case work
    case accept(Int)
    case reject(Int)
    case retry(Int, signer: Bool)
    /// The live location read first finds Fleet Engine this much ahead of the request's newest fix.
    case liveCheckFindsNewer(Int, by: Int64)
    case writeDeadLetter(Int)
    /// The write of a dead letter fails: the state orders it again at the end of its backoff.
    case failDeadLetter(Int)
    case advance(milliseconds: Int)
    /// Kafka answers one of the commits under way: an answer may come after a later order's,
    /// once the earlier order outlived its answer limit and was ordered again.
    case answerCommit(Int, failed: Bool)
    /// Revokes a partition: its requests under way end (accepted or abandoned) before the
    /// revoke finishes, or some stay in flight when `waitsForWork` is false (a drain timeout).
    case revoke(partition: Int, waitsForWork: Bool)
    case assign(partition: Int)
    /// Records begin or stop waiting to be taken in (the Schema Registry cannot be asked).
    case recordsWait(Bool)

    var description: String {
        switch self {
        case .fix(let vehicle, let time): "fix(v\(vehicle)@\(time))"
        case .bad(let partition): "bad(p\(partition))"
        case .skipped(let partition): "skipped(p\(partition))"
        case .work: "work"
        case .accept(let index): "accept(\(index))"
        case .reject(let index): "reject(\(index))"
        case .retry(let index, let signer): "retry(\(index), \(signer ? "signer" : "http_503"))"
        case .liveCheckFindsNewer(let index, let by): "liveCheckFindsNewer(\(index), +\(by))"
        case .writeDeadLetter(let index): "writeDeadLetter(\(index))"
        case .failDeadLetter(let index): "failDeadLetter(\(index))"
        case .advance(let milliseconds): "advance(\(milliseconds) ms)"
        case .answerCommit(let index, let failed): failed ? "commitRefused(\(index))" : "commitAnswered(\(index))"
        case .revoke(let partition, let waits): "revoke(p\(partition)\(waits ? "" : ", work still in flight"))"
        case .assign(let partition): "assign(p\(partition))"
        case .recordsWait(let waiting): waiting ? "recordsWait" : "recordsTakenIn"
        }
    }
}

/// Runs steps against a `PipelineState` and a model of what must be true.
final class PipelineModel {
    static let partitionCount = 3
    static let vehicleCount = 9

    static func steps(seed: UInt64, count: Int) -> [PipelineStep] {
        var random = SplitMix64(seed: seed)
        func pick(_ bound: Int) -> Int { Int(random.next() % UInt64(bound)) }
        return (0..<count).map { _ in
            switch pick(102) {
            case 0..<30: .fix(vehicle: pick(vehicleCount), time: Int64(pick(2_000)))
            case 30..<33: .bad(partition: pick(partitionCount))
            case 33..<35: .skipped(partition: pick(partitionCount))
            case 35..<50: .work
            case 50..<62: .accept(pick(16))
            case 62..<66: .reject(pick(16))
            case 66..<74: .retry(pick(16), signer: pick(2) == 0)
            case 74..<78: .liveCheckFindsNewer(pick(16), by: Int64(pick(300)))
            case 78..<81: .writeDeadLetter(pick(8))
            case 81..<83: .failDeadLetter(pick(8))
            case 83..<91: .advance(milliseconds: [1, 50, 400, 3_000, 12_000][pick(5)])
            case 91..<95: .answerCommit(pick(4), failed: pick(4) == 0)
            case 95..<98: .revoke(partition: pick(partitionCount), waitsForWork: pick(3) != 0)
            case 98..<100: .assign(partition: pick(partitionCount))
            default: .recordsWait(pick(2) == 0)
            }
        }
    }

    /// The first broken promise, or nil when every step and the final drain kept them all.
    static func run(_ steps: [PipelineStep]) -> String? {
        let model = PipelineModel()
        for (number, step) in steps.enumerated() {
            model.apply(step)
            if let broken = model.brokenPromise() { return "after step \(number + 1) \(step): \(broken)" }
        }
        model.drain()
        return model.brokenPromise() ?? model.brokenEndPromise()
    }

    /// Drops chunks of steps while the run still fails, halving the chunk down to one step.
    static func shrink(_ steps: [PipelineStep]) -> [PipelineStep] {
        var current = steps
        var chunk = max(1, current.count / 2)
        while chunk >= 1 {
            var start = 0
            var removedAny = false
            while start < current.count {
                var candidate = current
                candidate.removeSubrange(start..<min(start + chunk, candidate.count))
                if run(candidate) != nil {
                    current = candidate
                    removedAny = true
                } else {
                    start += chunk
                }
            }
            if !removedAny { chunk /= 2 }
        }
        return current
    }

    // MARK: State and model

    private let start = ContinuousClock.now
    private var now: ContinuousClock.Instant
    private var state: PipelineState<Int>
    private var generations: [Int32: UInt64] = [:]
    /// Partitions between the revoke's beginning and its end: no longer owned.
    private var revoking: Set<Int32> = []
    /// The highest offset the state reported committed, per partition, under its generation.
    private var committedHighest: [Int32: (generation: UInt64, offset: Int64)] = [:]
    private var recordsWaiting = false
    private var nextGeneration: UInt64 = 1
    private var nextOffset: [Int32: Int64] = [:]
    private var nextWorker = 0
    private var waiting: Set<Int> = []
    private var inFlight: [CoalescedRequest] = []
    private var deadLetters: [DeadLetterOrder] = []
    /// Letters whose write failed, until the state orders them again (or drops them, revoked).
    private var lettersFailed: [DeadLetterOrder] = []
    private var commitsUnderWay: [CommitOrder] = []
    private var announcedWish: Set<TopicPartition> = []
    /// Records of requests that failed transiently, back in their vehicle's queue.
    private var heldForRetry: [RecordKey: (vehicle: String, time: Int64)] = [:]
    /// The newest fix each vehicle had accepted, or that Fleet Engine was found to hold, as
    /// far as the state was told while owning the vehicle's partition.
    private var newestKnown: [String: Int64] = [:]
    /// What Fleet Engine holds, whoever sent it: the live location a read finds.
    private var fleetEngineHolds: [String: Int64] = [:]
    /// Records of requests abandoned in a revoke: unfinished for the next owner.
    private var abandoned: Set<RecordKey> = []
    private var finished: Set<RecordKey> = []
    private var endings: [RecordKey: Int] = [:]
    private var consumed: [RecordKey] = []
    private var violations: [String] = []

    struct RecordKey: Hashable, CustomStringConvertible {
        let partition: Int32
        let offset: Int64
        let generation: UInt64
        var description: String { "p\(partition)/\(offset)#\(generation)" }
    }

    init() {
        now = start
        state = PipelineState(limits: .init(pastLocations: 3, maximumPendingRecords: 30,
                                            retryPolicy: RetryPolicy(initialDelay: .milliseconds(100), maximumDelay: .seconds(2))),
                              now: start)
        assign((0..<Int32(Self.partitionCount)).map { $0 })
        // One letter writer, which asks again as soon as it took a letter: every letter the
        // state has ready reaches the model in the event that readied it.
        observe(state.requestLetter(Self.letterWriter, now: now))
    }

    private static let letterWriter = -1

    private func partition(_ number: Int32) -> TopicPartition { TopicPartition(topic: "t", partition: number) }

    /// Whether work on the record goes on, as the model sees it: its partition assigned under
    /// its generation and not being revoked.
    private func owns(_ source: RecordSource) -> Bool {
        let number = source.topicPartition.partition
        return generations[number] == source.generation && !revoking.contains(number)
    }

    private func key(_ source: RecordSource) -> RecordKey {
        RecordKey(partition: source.topicPartition.partition, offset: source.offset, generation: source.generation)
    }

    private func source(partition number: Int32) -> RecordSource? {
        guard let generation = generations[number] else { return nil }
        let offset = nextOffset[number, default: 0]
        nextOffset[number] = offset + 1
        return RecordSource(KafkaRecord(topic: "t", partition: number, offset: offset, key: nil, value: [],
                                        assignmentGeneration: generation))
    }

    // MARK: Steps

    func apply(_ step: PipelineStep) {
        switch step {
        case .fix(let vehicle, let time):
            let number = Int32(vehicle % Self.partitionCount)
            guard let source = source(partition: number) else { return }
            let update = LocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: "v\(vehicle)"),
                                        fix: LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: time))
            consume(.fix(PendingFix(update: update, source: source)))
        case .bad(let number):
            guard let source = source(partition: Int32(number)) else { return }
            consume(.bad(source, reason: .notJSON, detail: ""))
        case .skipped(let number):
            guard let source = source(partition: Int32(number)) else { return }
            consume(.skipped(source))
        case .work:
            nextWorker += 1
            waiting.insert(nextWorker)
            observe(state.requestWork(nextWorker, now: now))
        case .accept(let index):
            guard let request = takeRequest(index) else { return }
            complete(request, forwarded(request))
        case .reject(let index):
            guard let request = takeRequest(index) else { return }
            complete(request, Delivery(outcome: .rejected(.invalid, detail: "")))
        case .retry(let index, let signer):
            guard let request = takeRequest(index) else { return }
            let failure = TransientFailure(cause: signer ? .signer : .status(503), detail: "")
            complete(request, Delivery(outcome: .retry(failure)))
        case .liveCheckFindsNewer(let index, let by):
            guard !inFlight.isEmpty, inFlight[index % inFlight.count].liveCheckEpoch != nil,
                  let request = takeRequest(index) else { return }
            let newest = request.update.lastLocation.recordedAtMilliseconds + by
            complete(request, Delivery(outcome: .stale, newestKnownMilliseconds: newest, liveChecked: true))
        case .writeDeadLetter(let index):
            guard !deadLetters.isEmpty else { return }
            let order = deadLetters.remove(at: index % deadLetters.count)
            let ending = owns(order.source)
            observe(state.deadLetterWritten(order.source, now: now))
            if ending { end(key(order.source)) }
        case .failDeadLetter(let index):
            guard !deadLetters.isEmpty else { return }
            let order = deadLetters.remove(at: index % deadLetters.count)
            lettersFailed.append(order)
            observe(state.deadLetterFailed(order, now: now, random: { $0.upperBound }))
        case .advance(let milliseconds):
            now += .milliseconds(milliseconds)
            observe(state.deadlineReached(now: now))
        case .answerCommit(let index, let failed):
            guard !commitsUnderWay.isEmpty else { return }
            let order = commitsUnderWay.remove(at: index % commitsUnderWay.count)
            observe(state.commitAnswered(order, failure: failed ? "refused" : nil, now: now))
        case .revoke(let number, let waitsForWork):
            revoke(Int32(number), waitsForWork: waitsForWork)
        case .assign(let number):
            guard generations[Int32(number)] == nil else { return }
            assign([Int32(number)])
        case .recordsWait(let waiting):
            recordsWaiting = waiting
            observe(state.recordsWait(waiting))
        }
    }

    private func consume(_ record: ConsumedRecord) {
        let recordKey = key(record.source)
        consumed.append(recordKey)
        let (actions, _) = state.consume([record], now: now)
        if case .skipped = record { end(recordKey) }
        observe(actions)
    }

    /// What the forwarder makes of a request Fleet Engine would accept: one whose live
    /// location is read first and found at or past its newest fix sends nothing (stale).
    private func forwarded(_ request: CoalescedRequest) -> Delivery {
        let newest = request.update.lastLocation.recordedAtMilliseconds
        guard request.liveCheckEpoch != nil else { return Delivery(outcome: .accepted, newestKnownMilliseconds: newest) }
        let live = fleetEngineHolds[request.update.vehicle.id] ?? .min
        return live >= newest
            ? Delivery(outcome: .stale, newestKnownMilliseconds: live, liveChecked: true)
            : Delivery(outcome: .accepted, newestKnownMilliseconds: newest, liveChecked: true)
    }

    private func takeRequest(_ index: Int) -> CoalescedRequest? {
        inFlight.isEmpty ? nil : inFlight.remove(at: index % inFlight.count)
    }

    private func complete(_ request: CoalescedRequest, _ delivery: Delivery) {
        let owned = request.sources.allSatisfy(owns)
        let (actions, _) = state.complete(request, delivery, now: now, random: { $0.lowerBound })
        let vehicle = request.update.vehicle.id
        if delivery.outcome == .accepted {
            fleetEngineHolds[vehicle] = max(fleetEngineHolds[vehicle] ?? .min, request.update.lastLocation.recordedAtMilliseconds)
        }
        if owned, let newest = delivery.newestKnownMilliseconds {
            newestKnown[vehicle] = max(newestKnown[vehicle] ?? .min, newest)
            // Held fixes Fleet Engine is now known to be past end as stale.
            for (held, fix) in heldForRetry where fix.vehicle == vehicle && fix.time <= newest {
                heldForRetry[held] = nil
                end(held)
            }
        }
        guard owned else {
            observe(actions)
            return
        }
        switch delivery.outcome {
        case .accepted, .stale:
            for source in request.sources { end(key(source)) }
        case .retry:
            for fix in [request.newest] + request.carried {
                heldForRetry[key(fix.source)] = (vehicle, fix.update.fix.recordedAtMilliseconds)
            }
        case .rejected:
            break  // dead letters ordered
        case .abandoned:
            for source in request.sources { abandoned.insert(key(source)) }
        }
        observe(actions)
    }

    private func revoke(_ number: Int32, waitsForWork: Bool) {
        guard generations[number] != nil else { return }
        let revoked = [partition(number)]
        state.beginRevoke(revoked)
        revoking.insert(number)
        if waitsForWork {
            let underWay = inFlight.filter { $0.sources.contains { $0.topicPartition.partition == number } }
            inFlight.removeAll { $0.sources.contains { $0.topicPartition.partition == number } }
            for (index, request) in underWay.enumerated() {
                complete(request, index % 2 == 0 ? forwarded(request) : Delivery(outcome: .abandoned))
            }
        }
        let (offsets, pause) = state.finishRevoke(revoked)
        for offset in offsets {
            checkCommit(offset, what: "the revoke's final commit")
            checkForward(offset.offset, of: number)
        }
        generations[number] = nil
        revoking.remove(number)
        heldForRetry = heldForRetry.filter { $0.key.partition != number }
        deadLetters.removeAll { $0.source.topicPartition.partition == number }
        lettersFailed.removeAll { $0.source.topicPartition.partition == number }
        observe(pause)
    }

    private func assign(_ numbers: [Int32]) {
        nextGeneration += 1
        for number in numbers { generations[number] = nextGeneration }
        observe(state.assign(numbers.map(partition), generation: nextGeneration))
    }

    private func observe(_ change: PauseChange?) {
        if let change { announcedWish = change.wish }
    }

    private func observe(_ actions: PipelineActions<Int>) {
        for (worker, request) in actions.resume {
            guard waiting.remove(worker) != nil else {
                violations.append("worker \(worker) resumed twice")
                continue
            }
            guard let request else { continue }
            handOut(request)
        }
        var lettersTaken: [DeadLetterOrder] = []
        for (writer, letter) in actions.resumeLetters {
            guard writer == Self.letterWriter, let letter else {
                violations.append("the letter writer was released while letters may still come")
                continue
            }
            lettersTaken.append(letter)
        }
        for order in lettersTaken {
            let recordKey = key(order.source)
            if order.failedWrites > 0 {
                guard let index = lettersFailed.firstIndex(where: { key($0.source) == recordKey }) else {
                    violations.append("\(recordKey)'s dead letter is ordered again, but its write did not fail or its partition is no longer ours")
                    continue
                }
                lettersFailed.remove(at: index)
            }
            if finished.contains(recordKey) { violations.append("\(recordKey)'s dead letter is ordered after it finished") }
        }
        deadLetters += lettersTaken
        if let change = actions.pause { announcedWish = change.wish }
        // A bad record's dead letter is ordered as it is consumed.
        if !lettersTaken.isEmpty { observe(state.requestLetter(Self.letterWriter, now: now)) }
    }

    /// The timer's turn: a commit order it makes never passes a record known unfinished, nor
    /// goes back on what was committed.
    private func observe(_ turn: (PipelineActions<Int>, CommitDeadline)) {
        observe(turn.0)
        if let order = turn.1.order {
            for offset in order.offsets {
                checkCommit(offset, what: "a commit order")
                let number = offset.topicPartition.partition
                if let highest = committedHighest[number], highest.generation == generations[number], offset.offset < highest.offset {
                    violations.append("a commit order takes p\(number) back from \(highest.offset) to \(offset.offset)")
                }
            }
            commitsUnderWay.append(order)
        }
    }

    private func handOut(_ request: CoalescedRequest) {
        let vehicle = request.update.vehicle.id
        let times = request.update.pastLocations.map(\.recordedAtMilliseconds) + [request.update.lastLocation.recordedAtMilliseconds]
        // A request whose live location is read first is checked by that read (the forwarder's job).
        if request.liveCheckEpoch == nil, let newest = newestKnown[vehicle], let oldest = times.min(), oldest <= newest {
            violations.append("\(vehicle) is sent a fix at \(oldest), not after the \(newest) it already has: \(times)")
        }
        if times != times.sorted() { violations.append("\(vehicle)'s fixes are not oldest first: \(times)") }
        for source in request.sources {
            let recordKey = key(source)
            if finished.contains(recordKey) { violations.append("\(recordKey) is sent after it finished") }
            if inFlight.contains(where: { $0.sources.contains { key($0) == recordKey } }) {
                violations.append("\(recordKey) is in two requests at once")
            }
            heldForRetry[recordKey] = nil
        }
        inFlight.append(request)
    }

    private func end(_ recordKey: RecordKey) {
        endings[recordKey, default: 0] += 1
        finished.insert(recordKey)
    }

    // MARK: Promises

    /// Records whose partition is assigned under their generation and that are certainly not finished.
    private var knownUnfinished: [RecordKey] {
        let current = { (recordKey: RecordKey) in self.generations[recordKey.partition] == recordKey.generation }
        return (inFlight.flatMap { $0.sources.map(key) } + heldForRetry.keys + deadLetters.map { key($0.source) }
                + lettersFailed.map { key($0.source) } + abandoned)
            .filter(current)
    }

    private func checkCommit(_ offset: TopicPartitionOffset, what: String) {
        let number = offset.topicPartition.partition
        guard let lowest = knownUnfinished.filter({ $0.partition == number }).map(\.offset).min() else { return }
        if offset.offset > lowest {
            violations.append("\(what) at \(offset) passes the unfinished record p\(number)/\(lowest)")
        }
    }

    /// A committed offset of a partition only moves forward under one assignment generation.
    private func checkForward(_ committed: Int64, of number: Int32) {
        guard let generation = generations[number] else { return }
        if let highest = committedHighest[number], highest.generation == generation {
            if committed < highest.offset {
                violations.append("p\(number)'s committed offset moved back from \(highest.offset) to \(committed)")
            }
            if committed <= highest.offset { return }
        }
        committedHighest[number] = (generation, committed)
    }

    /// The wish against the model's own counts: records it knows unfinished (a lower bound),
    /// and records consumed that it has not seen finish (an upper bound: a fix dropped as
    /// stale when its vehicle is taken from the queue finishes unseen).
    private func checkPauseWish(_ wish: Set<TopicPartition>) {
        let assigned = Set(generations.keys.map(partition))
        if recordsWaiting {
            if wish != assigned { violations.append("records wait, yet the wish \(wish.map(\.description).sorted()) is not every partition") }
            return
        }
        let share = max(1, 30 / max(1, generations.count))
        let known = Dictionary(grouping: knownUnfinished, by: \.partition).mapValues(\.count)
        for (number, generation) in generations {
            let atLeast = known[number, default: 0]
            let atMost = consumed.filter { $0.partition == number && $0.generation == generation && !finished.contains($0) }.count
            if atLeast >= share, !wish.contains(partition(number)) {
                violations.append("p\(number) holds at least \(atLeast) unfinished records, its share \(share), and is not paused")
            }
            if atMost <= share / 2, wish.contains(partition(number)) {
                violations.append("p\(number) holds at most \(atMost) unfinished records, half its share or less, and stays paused")
            }
        }
    }

    func brokenPromise() -> String? {
        for offset in state.offsetsToCommit() { checkCommit(offset, what: "the committable offset") }
        for (partition, committed) in state.lastCommittedOffsets {
            checkCommit(TopicPartitionOffset(partition, offset: committed), what: "the committed offset")
            checkForward(committed, of: partition.partition)
        }
        checkPauseWish(state.pauseWish)
        if announcedWish != state.pauseWish {
            let wish = state.pauseWish
            violations.append("the announced pause wish \(announcedWish.map(\.description).sorted()) is not the state's \(wish.map(\.description).sorted())")
        }
        if let twice = endings.first(where: { $0.value > 1 }) { violations.append("\(twice.key) ended \(twice.value) times") }
        return violations.first
    }

    /// Answers everything still under way, writes every dead letter and lets the deadlines pass.
    func drain() {
        for _ in 0..<200 {
            while let order = deadLetters.popLast() {
                let ending = owns(order.source)
                observe(state.deadLetterWritten(order.source, now: now))
                if ending { end(key(order.source)) }
            }
            while let request = inFlight.popLast() { complete(request, forwarded(request)) }
            while let order = commitsUnderWay.popLast() { observe(state.commitAnswered(order, failure: nil, now: now)) }
            now += .seconds(5)
            observe(state.deadlineReached(now: now))
            nextWorker += 1
            waiting.insert(nextWorker)
            observe(state.requestWork(nextWorker, now: now))
            if inFlight.isEmpty, deadLetters.isEmpty, lettersFailed.isEmpty, state.queuedFixes == 0, state.unfinishedRecords == 0 { break }
        }
    }

    func brokenEndPromise() -> String? {
        guard state.unfinishedRecords == 0 else { return "\(state.unfinishedRecords) records never finished" }
        let committable = Dictionary(uniqueKeysWithValues: state.offsetsToCommit().map { ($0.topicPartition.partition, $0.offset) })
        for (number, generation) in generations {
            let records = consumed.filter { $0.partition == number && $0.generation == generation }
            guard let last = records.map(\.offset).max() else { continue }
            let position = committable[number] ?? state.lastCommittedOffsets[partition(number)]
            if position != last + 1 { return "p\(number) commits at \(position.map(String.init) ?? "nothing"), not \(last + 1)" }
            // Each record of the current assignment ended once: a stale fix dropped as it came
            // in ends without passing the model, so only more than once is counted.
        }
        return nil
    }
}
