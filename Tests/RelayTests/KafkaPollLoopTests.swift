import Foundation
@testable import Kafka
import KafkaTesting
import Logging
import NIOCore
import Synchronization
import Testing

/// The consumer's poll thread waits in librdkafka, woken by what concerns it, never polling
/// its own state at an interval. Here an idle poll waits a minute: whatever must take effect
/// sooner has to wake it.
@Suite struct KafkaPollLoopTests {
    let logger = Logger(label: "poll-loop-test")

    /// The partitions the rebalance callbacks handed over.
    final class Assignment: Sendable {
        let partitions = Mutex<Set<TopicPartition>>([])
    }

    /// When each record (by value) first reached the reader, how often it did, and from which partitions.
    final class Arrivals: Sendable {
        let times = Mutex<[String: ContinuousClock.Instant]>([:])
        let counts = Mutex<[String: Int]>([:])
        /// The partitions records came from.
        let partitions = Mutex<Set<Int32>>([])

        func note(_ chunk: [KafkaRecord]) {
            let now = ContinuousClock.now
            for record in chunk {
                let value = String(decoding: record.value, as: UTF8.self)
                times.withLock { if $0[value] == nil { $0[value] = now } }
                counts.withLock { $0[value, default: 0] += 1 }
                partitions.withLock { _ = $0.insert(record.partition) }
            }
        }
    }

    func consumer(_ cluster: KafkaMockCluster, assigned: Assignment, heartbeatMilliseconds: Int = 500,
                  extra: [String: String] = [:]) throws -> KafkaConsumer {
        let configuration = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers, extra: [
            "group.id": "intake", "session.timeout.ms": "\(max(6000, 3 * heartbeatMilliseconds))",
            "heartbeat.interval.ms": "\(heartbeatMilliseconds)", "statistics.interval.ms": "0",
        ].merging(extra) { _, given in given })
        let consumer = try KafkaConsumer(configuration: configuration, topics: ["t"], logger: logger) { event in
            switch event {
            case .assigned(let partitions, _): assigned.partitions.withLock { $0.formUnion(partitions) }
            case .revoked(let partitions, _): assigned.partitions.withLock { $0.subtract(partitions) }
            }
            return []
        }
        consumer.idlePollMilliseconds.store(60_000, ordering: .relaxed)
        return consumer
    }

    /// The poll thread goes by its own name in `top -H`, `perf` and the bench's profile, not by
    /// the name of the thread that started it.
    @Test func thePollThreadGoesByItsName() async throws {
        let thread = PollThread(name: "poll-name-test")
        let seen = Mutex<String?>(nil)
        await thread.run {
            let name = try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)
            seen.withLock { $0 = name?.trimmingCharacters(in: .newlines) }
        }
        #expect(seen.withLock { $0 } == "poll-name-test")
    }

    /// The hand-over may ask for more while the yield that found it full is still returning: that
    /// ask must not be lost, or the poll thread would wait for the reader forever with every
    /// partition paused.
    @Test func anAskForMoreDuringAFullYieldIsNotLost() {
        let demand = ReaderDemand()
        let mark = demand.demandMark
        demand.produceMore()
        demand.readerIsBehind(since: mark)
        #expect(demand.waitForDemand(timeout: .zero), "the reader asked after the yield began")
        demand.readerIsBehind(since: demand.demandMark)
        #expect(!demand.waitForDemand(timeout: .milliseconds(10)), "no ask since: the reader is behind")
        demand.produceMore()
        #expect(demand.waitForDemand(timeout: .zero))
    }

    @Test func aNewAssignmentAndEachPauseChangeWakeTheIdlePollThread() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: logger)
        try cluster.createTopic("t", partitions: 2)
        let (first, second) = (TopicPartition(topic: "t", partition: 0), TopicPartition(topic: "t", partition: 1))
        let assigned = Assignment()
        let consumer = try consumer(cluster, assigned: assigned)
        consumer.setPaused([first, second], sequence: 1)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await consumer.run() }
            try await eventually("both partitions are assigned", timeout: .seconds(60)) {
                assigned.partitions.withLock { $0 } == [first, second]
            }
            try await eventually("the wish is applied to the new assignment", timeout: .seconds(30)) {
                consumer.pausedPartitionCount == 2
            }
            consumer.setPaused([first], sequence: 2)
            try await eventually("a resume takes effect", timeout: .seconds(30)) { consumer.pausedPartitionCount == 1 }
            consumer.setPaused([first, second], sequence: 4)
            try await eventually("a pause takes effect", timeout: .seconds(30)) { consumer.pausedPartitionCount == 2 }
            consumer.setPaused([], sequence: 3)
            #expect(consumer.pauseWish == [first, second], "a wish older than the one applied is ignored")
            await consumer.close()
            try await group.waitForAll()
        }
    }

    /// librdkafka 2.0 does not wake a broker thread that idles because every partition it
    /// fetches is paused: a resumed partition would fetch at the thread's next wakeup, up to a
    /// second later (heartbeats, here every 5 s, wake it no sooner; a fetch's wait of 1 ms lets
    /// it idle soon after the pause). Each round pauses every partition, produces a record,
    /// resumes, and times the record's arrival at the reader. Seeking each resumed partition to
    /// where it resumes wakes the thread: ten rounds took a few milliseconds each, and without the
    /// seek about 0.9 s each.
    @Test func aResumedPartitionFetchesAtOnce() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: logger)
        try cluster.createTopic("t", partitions: 4)
        let partitions = Set((0..<4).map { TopicPartition(topic: "t", partition: Int32($0)) })
        let assigned = Assignment()
        let consumer = try consumer(cluster, assigned: assigned, heartbeatMilliseconds: 5000, extra: ["fetch.wait.max.ms": "1"])
        let arrivals = Arrivals()
        let producer = try KafkaProducer(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await consumer.run() }
            group.addTask {
                for try await chunk in consumer.records { arrivals.note(chunk) }
            }
            try await eventually("the partitions are assigned", timeout: .seconds(60)) {
                assigned.partitions.withLock { $0 } == partitions
            }
            let waits = try await producer.whileRunning {
                // A partition has a position to resume at once a record of it arrived: first
                // records go out under forty keys until each partition handed one over.
                for index in 0..<40 {
                    try await producer.enqueue(topic: "t", key: Array("key \(index)".utf8), value: Array("first \(index)".utf8))
                }
                #expect(await producer.flush())
                try await eventually("a first record of each partition arrives", timeout: .seconds(60)) {
                    arrivals.partitions.withLock { $0 } == Set(partitions.map(\.partition))
                }
                var waits: [Duration] = []
                for round in 0..<10 {
                    consumer.setPaused(partitions, sequence: UInt64(2 * round + 1))
                    try await eventually("round \(round) paused", timeout: .seconds(30)) { consumer.pausedPartitionCount == 4 }
                    try await producer.enqueue(topic: "t", key: nil, value: Array("round \(round)".utf8))
                    #expect(await producer.flush(), "round \(round)'s record is in the log before the resume")
                    let resumed = ContinuousClock.now
                    consumer.setPaused([], sequence: UInt64(2 * round + 2))
                    try await eventually("round \(round)'s record arrives", timeout: .seconds(30)) {
                        arrivals.times.withLock { $0["round \(round)"] } != nil
                    }
                    waits.append(arrivals.times.withLock { $0["round \(round)"]! } - resumed)
                }
                return waits
            }
            let total = waits.reduce(.zero, +)
            #expect(total < .seconds(3), "ten resumes waited \(total) for their records: \(waits)")
            #expect(arrivals.counts.withLock { $0 } == Dictionary(uniqueKeysWithValues: (0..<10).map { ("round \($0)", 1) } + (0..<40).map { ("first \($0)", 1) }),
                    "each record arrives once: the seek goes where the fetching resumes anyway")
            await consumer.close()
            try await group.waitForAll()
        }
    }

    /// The producer's poll thread waits for the next delivery report with no timeout: a flush
    /// asked of an idle producer, with nothing queued that would bring a report, and its stop
    /// have to wake it. With either wake taken out, that call is never answered.
    @Test func anIdleProducersFlushAndStopWakeItsPollThread() async throws {
        let cluster = try KafkaMockCluster(brokers: 1, logger: logger)
        try cluster.createTopic("t", partitions: 1)
        let producer = try KafkaProducer(configuration: KafkaConfiguration(bootstrapServers: cluster.bootstrapServers), logger: logger)
        let running = Task { await producer.run() }
        try await producer.send(topic: "t", key: nil, value: Array("acknowledged".utf8))
        for round in 0..<3 {
            let flushed = await answered(within: .seconds(30)) { await producer.flush(timeout: .seconds(5)) }
            #expect(flushed == true, "flush \(round) of an idle producer is answered, with nothing to wait for")
        }
        let stopped = await answered(within: .seconds(30)) { await producer.close(timeout: .seconds(5)); return true }
        #expect(stopped == true, "closing an idle producer ends its poll thread")
        await running.value
    }

    /// A resumed partition is sought to one past the last record handed over under its current
    /// assignment: a chunk polled across a rebalance may end with records of the assignment
    /// revoked meanwhile, and seeking the new one there would skip what it must read again.
    @Test func aResumePositionComesFromTheCurrentAssignmentsRecordsOnly() {
        func record(_ partition: Int32, _ offset: Int64, generation: UInt64) -> KafkaRecord {
            KafkaRecord(topic: "t", partition: partition, offset: offset, key: nil, value: [], assignmentGeneration: generation)
        }
        let (p0, p1, p2) = (TopicPartition(topic: "t", partition: 0), TopicPartition(topic: "t", partition: 1),
                            TopicPartition(topic: "t", partition: 2))
        let current: [TopicPartition: UInt64] = [p0: 1, p1: 2, p2: 2]
        var positions = FetchPositions()
        positions.note([record(0, 5, generation: 1), record(0, 6, generation: 1), record(1, 40, generation: 1),
                        record(2, 7, generation: 1), record(2, 8, generation: 2), record(0, 7, generation: 1)]) {
            current[$0] ?? 0
        }
        #expect(positions.next == [p0: 8, p2: 9], "p1's last record is of its revoked assignment")
        positions.forget([p0])
        #expect(positions.next == [p2: 9])
    }

    /// librdkafka 2.0 drops a pause or resume that reaches a partition after an operation its
    /// own thread created later (while it applies an assignment), so the consumer sets every
    /// pause inside the rebalance callback, where librdkafka waits for it: a revoked partition
    /// leaves no pause behind for a later assignment, and each partition assigned afterwards is
    /// paused as wished, or paused and resumed so that it fetches whatever came before.
    @Test func eachRebalanceSetsEveryPauseBeforeLibrdkafkaAppliesIt() {
        let handOver = NIOAsyncSequenceProducer.makeSequence(
            elementType: [KafkaRecord].self,
            backPressureStrategy: NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark(lowWatermark: 1, highWatermark: 2),
            finishOnDeinit: true, delegate: ReaderDemand())
        let context = ConsumerContext(logger: logger, demand: ReaderDemand(), source: handOver.source,
                                      rebalanceHandler: { _ in [] }, committedOnRevoke: { _ in }, consumeError: { _ in },
                                      statistics: { _ in })
        let (p0, p1, p2) = (TopicPartition(topic: "t", partition: 0), TopicPartition(topic: "t", partition: 1),
                            TopicPartition(topic: "t", partition: 2))
        context.control.withLock { $0.pausedPartitions = [p0] }

        let eagerAssign = context.rebalance(.assign([p0, p1]), cooperative: false)
        #expect(eagerAssign.pause == [p0, p1] && eagerAssign.resume == [p1])
        #expect(context.paused == [p0])

        let eagerRevoke = context.rebalance(.revoke([p0, p1], lost: false), cooperative: false)
        #expect(eagerRevoke.pause.isEmpty && eagerRevoke.resume == [p0, p1], "no pause outlives the assignment")
        #expect(context.paused.isEmpty)

        _ = context.rebalance(.assign([p0, p1]), cooperative: true)
        let cooperativeAssign = context.rebalance(.assign([p2]), cooperative: true)
        #expect(cooperativeAssign.pause == [p0, p1, p2] && cooperativeAssign.resume == [p1, p2],
                "the partitions kept get their pause set again too")
        context.control.withLock { $0.pausedPartitions = [p1] }
        let cooperativeRevoke = context.rebalance(.revoke([p0], lost: true), cooperative: true)
        #expect(cooperativeRevoke.pause == [p1, p2] && cooperativeRevoke.resume == [p0, p2])
        #expect(context.paused == [p1])
    }
}
