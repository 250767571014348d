import FleetEngine
import FleetModel
import InputFormats
import Kafka

/// One request's worth of a vehicle's fixes.
///
/// What a request carries is fixed when it is made and held once, in `Content`; the request
/// itself is that reference and the few fields the state machine changes along the way. A
/// request is copied several times between the vehicle's lane and its worker (into the
/// actions, out of them, into the worker's slot): held inline, each copy moved 320 bytes and
/// retained every string and array of its fixes again, and the requests of a chunk handed out
/// at once grew their array through blocks of kilobytes.
public struct CoalescedRequest: Sendable {
    /// The fixed part of a request, shared by its copies.
    private final class Content: Sendable {
        let update: VehicleLocationUpdate
        let newest: PendingFix
        let carried: [PendingFix]
        let partitions: ShortList<PartitionGeneration>

        init(update: VehicleLocationUpdate, newest: PendingFix, carried: [PendingFix], partitions: ShortList<PartitionGeneration>) {
            self.update = update
            self.newest = newest
            self.carried = carried
            self.partitions = partitions
        }
    }

    private let content: Content

    public var update: VehicleLocationUpdate { content.update }
    /// The record sent as `lastLocation`.
    public var newest: PendingFix { content.newest }
    /// Records sent in `pastLocations`, oldest first: settled with the request's outcome.
    public var carried: [PendingFix] { content.carried }
    /// Set when Fleet Engine's live location must be read first (first request for the
    /// vehicle since startup or a partition reassignment): the assignment epoch checked.
    public internal(set) var liveCheckEpoch: UInt64?
    /// Earlier attempts of the vehicle that failed transiently, and since when: drive the
    /// backoff before the next try and the retry deadline.
    public internal(set) var retryAttempts = 0
    public internal(set) var failingSince: ContinuousClock.Instant? {
        get { failingSinceMoment?.instant }
        set { failingSinceMoment = newValue.map(Moment.init) }
    }
    /// When the state machine handed the attempt to a worker.
    public internal(set) var startedAt: ContinuousClock.Instant? {
        get { startedAtMoment?.instant }
        set { startedAtMoment = newValue.map(Moment.init) }
    }
    /// The times above, stored as `Moment`s: `ContinuousClock.Instant` is resilient, so a
    /// struct holding one has a layout known only at run time, and each of the copies a
    /// request goes through on its way calls through its value witnesses. (Written out rather
    /// than `@StoredAsMoment`: a public property cannot use the module's internal wrapper.)
    private var failingSinceMoment: Moment?
    private var startedAtMoment: Moment?
    /// Set by the state when a partition of the request's records is revoked or reassigned:
    /// the forwarder sends nothing more then.
    public internal(set) var revocations = ShortList<Revocation>()
    /// Where the vehicle's lane was when the request was taken: its answer finds the lane
    /// without a hash lookup while no lane was removed meanwhile.
    var lane: VehicleScheduler.LaneHandle?

    /// Requests the attempt makes at most: the update, after a live-location read when asked.
    public var requestsAtMost: Int { liveCheckEpoch == nil ? 1 : 2 }

    /// Every record the request settles: the newest fix's, then those carried.
    public var sources: Sources { Sources(newest: content.newest, carried: content.carried) }
    /// The partitions (and their assignment generations) whose records the request settles.
    public var partitions: ShortList<PartitionGeneration> { content.partitions }

    /// The request's records read through its fixes, not kept apart: a second array of them
    /// retained every record's topic and bytes once more, and released them again.
    public struct Sources: RandomAccessCollection {
        let newest: PendingFix
        let carried: [PendingFix]

        public var startIndex: Int { 0 }
        public var endIndex: Int { carried.count + 1 }

        /// Lent, not copied: a caller reading a field takes no reference. An accessor coroutine,
        /// it allocates its frame at each read it is not inlined into: the ledger reads records
        /// through `forEachRecordOffset`.
        public subscript(position: Int) -> RecordSource {
            _read {
                if position == 0 { yield newest.source } else { yield carried[position - 1].source }
            }
        }
    }

    init(update: VehicleLocationUpdate, newest: PendingFix, carried: [PendingFix]) {
        // Almost always one partition (events are keyed by vehicle): a scan beats building a set
        // per request. Only each record's partition and generation are compared: a source compared
        // whole was copied first, its key and bytes retained and released (a fortieth of a drain's CPU).
        var partitions = ShortList(PartitionGeneration(newest.source.topicPartition, newest.source.generation))
        for index in carried.indices {
            let site = PartitionGeneration(carried[index].source.topicPartition, carried[index].source.generation)
            if !partitions.contains(site) { partitions.append(site) }
        }
        content = Content(update: update, newest: newest, carried: carried, partitions: partitions)
    }

    /// Each record's offset, in order, with its partition's position in `partitions`: all the
    /// ledger needs to finish them. Not the sources themselves: one lent to the ledger, which
    /// changes meanwhile, is copied out of its array first (its topic and bytes retained and
    /// released), and one read through `sources`, an accessor coroutine, allocates the
    /// coroutine's frame at each read the optimizer does not inline.
    func forEachRecordOffset(_ body: (_ partition: Int, _ offset: Int64) -> Void) {
        let (carried, partitions) = (content.carried, content.partitions)
        body(0, content.newest.source.offset)  // the newest fix's partition comes first
        for index in carried.indices {
            // One partition nearly always: no comparison needed then.
            let partition = partitions.count == 1 ? 0
                : partitions.firstIndex(of: PartitionGeneration(carried[index].source.topicPartition, carried[index].source.generation))
            guard let partition else { preconditionFailure("a request's partitions hold every one of its records' partitions") }
            body(partition, carried[index].source.offset)
        }
    }
}

/// A partition under one assignment generation.
public struct PartitionGeneration: Hashable, Sendable {
    public let topicPartition: TopicPartition
    public let generation: UInt64

    public init(_ topicPartition: TopicPartition, _ generation: UInt64) {
        self.topicPartition = topicPartition
        self.generation = generation
    }
}

/// Turns a vehicle's queued fixes into its next request. Fixes not newer than the
/// newest one Fleet Engine accepted are stale and never sent, so the vehicle never
/// moves backwards. The rest go out oldest first in chunks of at most `pastLimit + 1`:
/// each chunk's newest as `lastLocation`, the older ones as `pastLocations`. Fixes
/// beyond the first chunk stay queued for the vehicle's next request, so a history
/// longer than the cap is delivered whole and in time order.
public enum Coalescer {
    public static let defaultPastLimit = 100

    public struct Result: Sendable {
        public var request: CoalescedRequest?
        /// Not newer than what Fleet Engine holds: finished without being sent.
        public var stale: [PendingFix]
        /// Newer than this request's chunk: they wait for the vehicle's next request.
        public var later: [PendingFix]
    }

    public static func coalesce(
        vehicle: VehicleIdentity, fixes: consuming [PendingFix], newestAcceptedMilliseconds: Int64?, pastLimit: Int
    ) -> Result {
        let floor = newestAcceptedMilliseconds ?? .min
        // Stable sort: among equal times the later-consumed fix is the newer. A vehicle's fixes
        // are nearly always consumed in time order already, and then kept as they are.
        var ordered = consume fixes
        if !isInTimeOrder(ordered) {
            ordered = ordered.enumerated().sorted {
                ($0.element.update.fix.recordedAtMilliseconds, $0.offset) < ($1.element.update.fix.recordedAtMilliseconds, $1.offset)
            }.map(\.element)
        }
        // In time order, the stale fixes are the first ones.
        let firstFresh = ordered.firstIndex { $0.update.fix.recordedAtMilliseconds > floor } ?? ordered.endIndex
        // Nearly always nothing is stale and one request takes every fix: the queue itself
        // becomes the request's, without a copy of each fix (its strings and bytes retained).
        if firstFresh == ordered.startIndex, ordered.count <= max(0, pastLimit) + 1, let newest = ordered.popLast() {
            return Result(request: request(vehicle, newest: newest, past: ordered), stale: [], later: [])
        }
        let stale = Array(ordered[..<firstFresh])
        let fresh = ordered[firstFresh...]
        let chunk = fresh.prefix(max(0, pastLimit) + 1)
        guard let newest = chunk.last else { return Result(request: nil, stale: stale, later: []) }
        return Result(request: request(vehicle, newest: newest, past: Array(chunk.dropLast())), stale: stale,
                      later: Array(fresh.dropFirst(chunk.count)))
    }

    /// The request of a chunk: its newest fix as `lastLocation`, the others as `pastLocations`.
    private static func request(_ vehicle: VehicleIdentity, newest: PendingFix, past: [PendingFix]) -> CoalescedRequest {
        let update = VehicleLocationUpdate(vehicle: vehicle, lastLocation: newest.update.fix, pastLocations: past.map(\.update.fix))
        return CoalescedRequest(update: update, newest: newest, carried: past)
    }

    /// Reads each fix's time in place: pairing the fixes up (`zip`) copied every fix twice,
    /// retaining its strings and record bytes, a fiftieth of a drain's CPU.
    private static func isInTimeOrder(_ fixes: [PendingFix]) -> Bool {
        fixes.indices.dropFirst().allSatisfy {
            fixes[$0 - 1].update.fix.recordedAtMilliseconds <= fixes[$0].update.fix.recordedAtMilliseconds
        }
    }
}
