import FleetAuth
import FleetEngine
import FleetEngineEmulator
import FleetModel
import Foundation
import InputFormats
import Kafka
import Logging
import Relay
@testable import Replay
import Testing

/// A partition index with known record timestamps and a configurable broker answer.
struct FakeTimeIndex: PartitionTimeIndex {
    let stamps: [Int64]
    let answer: @Sendable (Int64) -> Int64

    func watermarks(_ partition: TopicPartition, timeout: Duration) async throws -> (low: Int64, high: Int64) {
        (0, Int64(stamps.count))
    }
    func offsetsForTimes(_ partitions: [TopicPartition], timestampMilliseconds: Int64,
                         timeout: Duration) async throws -> [TopicPartition: Int64] {
        Dictionary(uniqueKeysWithValues: partitions.map { ($0, answer(timestampMilliseconds)) })
    }
    func timestamp(of partition: TopicPartition, at offset: Int64, timeout: Duration) async throws -> Int64? {
        offset < stamps.count ? stamps[Int(offset)] : nil
    }

    /// What a correct broker answers.
    static func correct(_ stamps: [Int64]) -> @Sendable (Int64) -> Int64 {
        { time in stamps.firstIndex { $0 >= time }.map(Int64.init) ?? -1 }
    }
}

@Suite struct WindowResolverTests {
    let stamps: [Int64] = (0..<100).map { 1_000 + $0 * 10 }  // 1000, 1010, … 1990

    func resolve(_ answer: @escaping @Sendable (Int64) -> Int64, from: Int64, to: Int64?) async throws -> PartitionWindow {
        let resolver = WindowResolver(index: FakeTimeIndex(stamps: stamps, answer: answer))
        return try await resolver.resolve(topic: "t", partitions: [0], fromMilliseconds: from, toMilliseconds: to)[0]
    }

    @Test func aConsistentBrokerAnswerIsUsed() async throws {
        let window = try await resolve(FakeTimeIndex.correct(stamps), from: 1_200, to: 1_500)
        #expect(window == PartitionWindow(partition: 0, start: 20, end: 50, method: .lookup))
    }

    @Test func anEndAnswerContradictedByNewerRecordsFallsBackToSearch() async throws {
        // librdkafka's mock cluster answers -1 for every timestamp.
        let window = try await resolve({ _ in -1 }, from: 1_205, to: nil)
        #expect(window == PartitionWindow(partition: 0, start: 21, end: 100, method: .search))
    }

    @Test func aWrongOffsetAnswerFallsBackToSearch() async throws {
        let window = try await resolve({ _ in 3 }, from: 1_200, to: 1_300)
        #expect(window == PartitionWindow(partition: 0, start: 20, end: 30, method: .search))
    }

    @Test func anEndAnswerForATimeAfterTheLastRecordIsTrusted() async throws {
        let window = try await resolve({ _ in -1 }, from: 5_000, to: nil)
        #expect(window.records == 0)
        #expect(window.method == .lookup)
    }
}

@Suite struct ReplayParsingTests {
    @Test func timesAreAbsoluteOrRelativeToNow() throws {
        #expect(try ReplayTime.parse("2026-11-22T21:00:00.123Z") == 1_795_381_200_123)
        #expect(try ReplayTime.parse("-2h", nowMilliseconds: 10_000_000) == 10_000_000 - 7_200_000)
        #expect(try ReplayTime.parse("-90s", nowMilliseconds: 100_000) == 10_000)
        #expect(throws: ReplayTime.ParseError.self) { try ReplayTime.parse("yesterday") }
        #expect(throws: ReplayTime.ParseError.self) { try ReplayTime.parse("-2w") }
    }

    @Test func theCheckpointSurvivesARoundTripAndIsReplacedWhole() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("cp-\(UUID().uuidString).json").path
        var checkpoint = ReplayCheckpoint(topic: "t", fromMilliseconds: 1, toMilliseconds: nil,
                                          partitions: [PartitionWindow(partition: 0, start: 1, end: 9, method: .search)])
        try checkpoint.save(to: path)
        checkpoint.recordFinished([TopicPartitionOffset(TopicPartition(topic: "t", partition: 0), offset: 5)], of: "t")
        checkpoint.recordFinished([TopicPartitionOffset(TopicPartition(topic: "t", partition: 0), offset: 3)], of: "t")
        #expect(checkpoint.startOffset(of: checkpoint.partitions[0]) == 5, "a finished offset never moves back")
        try checkpoint.save(to: path)
        #expect(try ReplayCheckpoint.load(from: path) == checkpoint)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: FileManager.default.temporaryDirectory.path)
            .filter { $0.hasPrefix(".cp-") }
        #expect(leftovers.isEmpty)
    }

    /// Every save has its own temporary file: with one named by the PID (1 in every container),
    /// two saves at once wrote into one file and the second rename found nothing to rename.
    @Test func concurrentSavesEachReplaceTheCheckpointWhole() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cp-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("replay.json").path
        let versions = (0..<16).map { index in
            ReplayCheckpoint(topic: "t", fromMilliseconds: 1, toMilliseconds: nil,
                             partitions: [PartitionWindow(partition: 0, start: 1, end: 9, method: .lookup)],
                             finished: (0...index * 50).map { ReplayCheckpoint.Finished(partition: Int32($0), offset: 9) })
        }
        let failures = await withTaskGroup(of: Int.self) { group in
            for version in versions {
                group.addTask { (0..<20).reduce(0) { failed, _ in failed + ((try? version.save(to: path)) == nil ? 1 : 0) } }
            }
            return await group.reduce(0, +)
        }
        #expect(failures == 0)
        #expect(versions.contains(try #require(try ReplayCheckpoint.load(from: path))))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["replay.json"])
    }

    /// A checkpoint of the earlier format (vehicles settled, no finished offsets) is refused with
    /// what to do, not as unreadable.
    @Test func aCheckpointOfAnEarlierVersionIsRefusedWithWhatToDo() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("cp-\(UUID().uuidString).json").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(#"{"version":1,"topic":"t","fromMilliseconds":1,"partitions":[],"settledVehicles":[],"complete":false}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        #expect {
            _ = try ReplayCheckpoint.load(from: path)
        } throws: { error in
            "\(error)".contains("has version 1, expected 2") && "\(error)".contains("--restart")
        }
    }

    @Test func aCheckpointIsResumedOnlyByTheSameRequest() throws {
        let request = ReplayRequest(from: "-2h", to: nil, partitions: nil)
        let checkpoint = ReplayCheckpoint(topic: "t", request: request, fromMilliseconds: 1, toMilliseconds: nil, partitions: [])
        try checkpoint.check(topic: "t", request: request, path: "cp.json")
        #expect(throws: ReplayCheckpoint.Mismatch.self) { try checkpoint.check(topic: "u", request: request, path: "cp.json") }
        for other in [ReplayRequest(from: "-3h", to: nil, partitions: nil), ReplayRequest(from: "-2h", to: "-1h", partitions: nil),
                      ReplayRequest(from: "-2h", to: nil, partitions: [0])] {
            #expect(throws: ReplayCheckpoint.Mismatch.self) { try checkpoint.check(topic: "t", request: other, path: "cp.json") }
        }
    }
}

/// Replays against the mock cluster and the emulator.
extension IntegrationTests {
@Suite struct ReplayIntegrationTests {
    /// Produces one event per vehicle per step; the record timestamp is the fix time.
    static func produceTimed(_ harness: RelayHarness, vehicles: Int, steps: Int, start: Int64,
                             prefix: String = "veh-") async throws -> [GeneratedEvents.Event] {
        var events: [GeneratedEvents.Event] = []
        for step in 0..<steps {
            for index in 0..<vehicles {
                events.append(GeneratedEvents.Event(vehicle: "\(prefix)\(index)", latitude: 37 + Double(step) / 1000,
                                                    longitude: -122, recordedAt: start + Int64(step) * 1000 + Int64(index)))
            }
        }
        let (flushed, failed) = try await KafkaProducer.run(configuration: harness.kafka, logger: harness.logger) { producer in
            for event in events {
                try await producer.enqueue(topic: harness.topic, key: event.record.key, value: event.record.value,
                                           timestampMilliseconds: event.recordedAt)
            }
            return (await producer.flush(timeout: .seconds(60)), producer.failedDeliveries)
        }
        #expect(flushed)
        #expect(failed == 0)
        return events
    }

    static func configuration(_ harness: RelayHarness, from: Int64, to: Int64?,
                              edit: (inout ReplayConfiguration) -> Void = { _ in }) -> ReplayConfiguration {
        var configuration = ReplayConfiguration(
            topic: harness.topic, fromMilliseconds: from, toMilliseconds: to, maximumInFlight: 16,
            deadLetterTopic: harness.topic + ".dlq",
            retryPolicy: RetryPolicy(initialDelay: .milliseconds(10), maximumDelay: .milliseconds(200)))
        edit(&configuration)
        return configuration
    }

    static func replay(_ harness: RelayHarness, _ configuration: ReplayConfiguration,
                       over wireProtocol: FleetEngineProtocol = .rest) async throws -> ReplaySummary {
        let client = FleetEngineClient(configuration: .init(baseURL: harness.emulatorURL, provider: harness.key.projectId,
                                                            wireProtocol: wireProtocol, egress: try harness.egress()))
        defer { Task { await client.shutdown() } }
        let replayer = Replayer(configuration: configuration, kafka: harness.kafka,
                                sender: ReplaySender(client: client, tokens: TokenCache(signer: LocalKeySigner(key: harness.key))),
                                progress: ReplayProgress(style: .silent, logger: harness.logger), logger: harness.logger)
        return try await replayer.replay().summary
    }

    @Test func replaysRecordsOfABuiltInFormat() async throws {
        let harness = try await RelayHarness(partitions: 1)
        defer { Task { await harness.shutdown() } }
        let start = (WallClock.nowMilliseconds() - 3_600_000) / 1000 * 1000
        try await KafkaProducer.run(configuration: harness.kafka, logger: harness.logger) { producer in
            for step in 0..<3 {
                let seconds = start / 1000 + Int64(step)
                try await producer.send(topic: harness.topic, key: Array("owntracks/ann/van".utf8),
                                        value: Array(#"{"_type":"location","lat":48.1,"lon":11.5,"tst":\#(seconds),"vel":18}"#.utf8),
                                        timestampMilliseconds: seconds * 1000)
            }
            try await producer.send(topic: harness.topic, key: Array("owntracks/ann/van".utf8),
                                    value: Array(#"{"_type":"transition","event":"enter","tst":\#(start / 1000)}"#.utf8),
                                    timestampMilliseconds: start + 500)
        }
        let summary = try await Self.replay(harness, Self.configuration(harness, from: start - 1000, to: nil) {
            $0.inputMapping = BuiltInFormat.owntracks.mapping
        })
        #expect(summary.skipped == 1 && summary.bad == 0)
        #expect(summary.sent == 3 && summary.requestsSent == 1)
        let van = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "ann-van")))
        #expect(van.receivedFixTimes == [start, start + 1000, start + 2000])
        #expect(van.lastLocation["speed"]?.numberValue == 5, "18 km/h")
    }

    @Test func sendsExactlyTheWindowsFixesFoundDespiteTheMockClustersLookup() async throws {
        let harness = try await RelayHarness(partitions: 4)
        defer { Task { await harness.shutdown() } }
        let start = WallClock.nowMilliseconds() - 3_600_000
        let events = try await Self.produceTimed(harness, vehicles: 40, steps: 30, start: start)
        // Steps 10..<20 of every vehicle: vehicle i's fix of step s is stamped start + s s + i ms.
        let from = start + 10_000
        let to = start + 20_000
        // One malformed record inside the window: dead-lettered with its reason, nothing else lost.
        try await KafkaProducer.run(configuration: harness.kafka, logger: harness.logger) { producer in
            try await producer.send(topic: harness.topic, key: Array("veh-bad".utf8), value: Array(#"{"vehicle_id":"veh-bad"}"#.utf8),
                                    timestampMilliseconds: from + 5_000)
        }
        let summary = try await Self.replay(harness, Self.configuration(harness, from: from, to: to))

        let inWindow = events.filter { $0.recordedAt >= from && $0.recordedAt < to }
        #expect(summary.sent == inWindow.count && summary.unaccounted == 0)
        // The bad record, stamped inside the window but appended last, makes its partition's
        // timestamps go back: that partition is searched up to its end, and the records read
        // there beyond the window are skipped by their timestamps.
        #expect(summary.recordsRead == inWindow.count + 1 + summary.outsideWindow)
        #expect(summary.outsideWindow <= events.count / 4 * 2)
        #expect(summary.bad == 1 && summary.deadLettered == 1)
        #expect(try await harness.readDeadLetters(count: 1).first?.header("fleet-relay-error") == "missing_field")
        for vehicle in Set(events.map(\.vehicle)) {
            let stored = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: vehicle)))
            let expected = Set(inWindow.filter { $0.vehicle == vehicle }.map(\.recordedAt))
            #expect(stored.receivedFixTimes == expected, "\(vehicle)")
            #expect(stored.locationTimeMilliseconds == expected.max())
        }
        #expect(harness.emulator.statistics.updateRequests == 40)

        // --partitions: a dry run of partitions 1 and 3 reads exactly their records.
        let ends = try await harness.endOffsets()
        let replayer = Replayer(configuration: Self.configuration(harness, from: start, to: nil) {
            $0.partitions = [1, 3]
            $0.dryRun = true
        }, kafka: harness.kafka, sender: nil, progress: ReplayProgress(style: .silent, logger: harness.logger), logger: harness.logger)
        let (dryRun, plan) = try await replayer.replay()
        #expect(plan.windows.map(\.partition) == [1, 3])
        #expect(dryRun.recordsRead == Int(ends[1]! + ends[3]!))
        #expect(harness.emulator.statistics.updateRequests == 40)
        let missing = Replayer(configuration: Self.configuration(harness, from: start, to: nil) { $0.partitions = [9] },
                               kafka: harness.kafka, sender: nil, progress: ReplayProgress(style: .silent, logger: harness.logger),
                               logger: harness.logger)
        await #expect(throws: ReplayError.self) { try await missing.replay() }
    }

    @Test(.serialized, arguments: FleetEngineProtocol.allCases)
    func neverMovesALiveVehicleBackAndLeavesTheLiveGroupsOffsetsAlone(over wireProtocol: FleetEngineProtocol) async throws {
        let harness = try await RelayHarness(partitions: 4)
        defer { Task { await harness.shutdown() } }
        let start = WallClock.nowMilliseconds() - 3_600_000
        // An outage: the live relay dead-letters the window's fixes of 30 vehicles (Fleet Engine
        // is down past its retry deadline); after it, newer fixes of the first 10 get through.
        harness.emulator.goDown(for: .seconds(3600))
        _ = try await Self.produceTimed(harness, vehicles: 30, steps: 5, start: start)
        let relay = try harness.startRelay(group: "live", wireProtocol: wireProtocol) { $0.retryDeadline = .milliseconds(300) }
        try await eventually("the live relay dead-lettered the outage's fixes") { try await harness.committedToTheEnd(group: "live") }
        harness.emulator.goDown(for: .zero)
        let live = try await Self.produceTimed(harness, vehicles: 10, steps: 1, start: start + 600_000)
        try await eventually("the live relay delivered the newer fixes") {
            live.allSatisfy { harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: $0.vehicle)) != nil }
        }
        try await eventually("the live relay committed everything") { try await harness.committedToTheEnd(group: "live") }
        try await relay.stop()
        let committedBefore = try await harness.committedOffsets(group: "live")
        let updatesBefore = harness.emulator.statistics.updateRequests

        let summary = try await Self.replay(harness, Self.configuration(harness, from: start, to: start + 60_000), over: wireProtocol)
        #expect(summary.skippedNewerLive == 10 * 5 && summary.unaccounted == 0)
        #expect(summary.sent == 20 * 5)
        for event in live {
            let stored = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: event.vehicle)))
            #expect(stored.locationTimeMilliseconds == event.recordedAt)
        }
        #expect(harness.emulator.vehicles.values.allSatisfy { $0.backwardsUpdates == 0 })
        #expect(harness.emulator.statistics.updateRequests == updatesBefore + 20)
        #expect(try await harness.committedOffsets(group: "live") == committedBefore)
        harness.expectServed(over: wireProtocol)
    }

    /// 2,000 updates, each after a live-location read, are 4,000 requests: at 400/s they take
    /// 10 s: never less (the limit holds, reads counted), and not more than the same requests
    /// take unlimited on this machine on top of that (the limit does not throttle below its
    /// rate), so a slow machine lengthens the bound instead of failing the test.
    @Test func theRateLimitSpacesRequestsAtTheEmulator() async throws {
        let harness = try await RelayHarness(partitions: 4)
        defer { Task { await harness.shutdown() } }
        let start = WallClock.nowMilliseconds() - 600_000
        _ = try await Self.produceTimed(harness, vehicles: 2_000, steps: 1, start: start, prefix: "free-")
        let unlimited = try await Self.replay(harness, Self.configuration(harness, from: start, to: nil) { $0.maximumInFlight = 64 })
        #expect(unlimited.sent == 2_000)
        let free = harness.emulator.statistics
        let unlimitedSpan = try #require(free.lastUpdateAt) - (try #require(free.firstUpdateAt))

        let limitedStart = start + 60_000
        _ = try await Self.produceTimed(harness, vehicles: 2_000, steps: 1, start: limitedStart, prefix: "limited-")
        let firstLimited = ContinuousClock.now
        let summary = try await Self.replay(harness, Self.configuration(harness, from: limitedStart, to: nil) {
            $0.rate = 400
            $0.maximumInFlight = 64
        })
        #expect(summary.sent == 2_000)
        let statistics = harness.emulator.statistics
        #expect(statistics.updateRequests == 4_000)
        let span = try #require(statistics.lastUpdateAt) - max(firstLimited, try #require(free.lastUpdateAt))
        #expect(span >= .seconds(9), "4,000 requests at 400/s took \(span): faster than the limit")
        #expect(span <= .seconds(10) + unlimitedSpan * 2, "4,000 requests at 400/s took \(span); unlimited they took \(unlimitedSpan)")
    }

    /// A replay resumed later with the same relative `--from` filters on the checkpoint's window,
    /// not on `-2h` resolved again: fixes from the window's first minutes are still sent.
    @Test func aResumedReplayKeepsTheCheckpointsWindow() async throws {
        let harness = try await RelayHarness(partitions: 2)
        defer { Task { await harness.shutdown() } }
        let start = WallClock.nowMilliseconds() - 3_600_000
        // Six fixes a minute apart per vehicle: a resume 5 minutes later would cut off the first five.
        var events: [GeneratedEvents.Event] = []
        for step in 0..<6 {
            events += try await Self.produceTimed(harness, vehicles: 20, steps: 1, start: start + Int64(step) * 60_000)
        }
        let checkpoint = FileManager.default.temporaryDirectory.appendingPathComponent("replay-\(UUID().uuidString).json").path
        let request = ReplayRequest(from: "-2h", to: nil, partitions: nil)
        // The first run, without a dead-letter topic: Fleet Engine refuses five vehicles, whose
        // fixes stay unfinished and hold the checkpoint below them.
        let refused = Set((0..<5).map { "veh-\($0)" })
        harness.emulator.faultPlan.rejectedVehicles = refused
        let first = try await Self.replay(harness, Self.configuration(harness, from: start - 1000, to: nil) {
            $0.checkpointPath = checkpoint
            $0.requestedAs = request
            $0.deadLetterTopic = nil
        })
        #expect(first.sent == 15 * 6 && first.failed == 5 * 6 && first.unfinished == 0 && first.unaccounted == 0)
        harness.emulator.faultPlan.rejectedVehicles = []

        // Resumed "five minutes later": -2h now resolves to a later instant. What the first run
        // sent above the checkpoint is read again and skipped by the live location, not resent.
        let resumed = try await Self.replay(harness, Self.configuration(harness, from: start + 300_000 - 1000, to: nil) {
            $0.checkpointPath = checkpoint
            $0.requestedAs = request
            $0.deadLetterTopic = nil
        })
        #expect(resumed.sent == 5 * 6 && resumed.failed == 0 && resumed.unfinished == 0)
        #expect(resumed.alreadyFinished + resumed.recordsRead == 120 && resumed.recordsRead == resumed.sent + resumed.skippedNewerLive)
        #expect(resumed.outsideWindow == 0)
        for vehicle in Set(events.map(\.vehicle)) {
            let stored = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: vehicle)))
            #expect(stored.receivedFixTimes == Set(events.filter { $0.vehicle == vehicle }.map(\.recordedAt)), "\(vehicle)")
        }
        #expect(harness.emulator.statistics.locationsReceived == 120, "every fix once")
        #expect(try ReplayCheckpoint.load(from: checkpoint)?.complete == true)

        // A different window stops with the mismatch; --restart starts over.
        let other = Self.configuration(harness, from: start - 1000, to: nil) {
            $0.checkpointPath = checkpoint
            $0.requestedAs = ReplayRequest(from: "-3h", to: nil, partitions: nil)
        }
        await #expect(throws: ReplayCheckpoint.Mismatch.self) { try await Self.replay(harness, other) }
        var restart = other
        restart.restart = true
        restart.force = true
        let restarted = try await Self.replay(harness, restart)
        #expect(restarted.alreadyFinished == 0 && restarted.sent == 120)
    }

    /// Retention deleted the start of a checkpoint's window before the resumed replay read it:
    /// the reader restarts at the oldest record left (not at the end), and the shortfall is
    /// reported per partition with exit 1.
    @Test func recordsDeletedBeforeTheyWereReadAreReportedPerPartition() async throws {
        let harness = try await RelayHarness(partitions: 1)
        defer { Task { await harness.shutdown() } }
        let start = WallClock.nowMilliseconds() - 3_600_000
        _ = try await Self.produceTimed(harness, vehicles: 10, steps: 20, start: start)
        // The mock cluster keeps about 5 MiB per partition: later records (stamped after the
        // window's times) push the window's first records out. Produce them until that happened,
        // and a few more, which then lie in the checkpoint's offset range past the deletion.
        let reader = try KafkaPartitionReader(configuration: harness.kafka, logger: harness.logger)
        let partition = TopicPartition(topic: harness.topic, partition: 0)
        let filler = [UInt8](repeating: UInt8(ascii: "x"), count: 128 * 1024)
        try await KafkaProducer.run(configuration: harness.kafka, logger: harness.logger) { producer in
            var extra = 0
            for _ in 0..<256 where extra < 4 {
                try await producer.send(topic: harness.topic, key: nil, value: filler, timestampMilliseconds: start + 60_000)
                if try await reader.watermarks(partition).low > 0 { extra += 1 }
            }
        }
        let (logStart, end) = try await reader.watermarks(partition)
        try #require(logStart > 0 && logStart < end, "the mock cluster deleted offsets 0..<\(logStart) of 0..<\(end)")
        // The checkpoint of a replay resolved before the deletion, resumed after it.
        let checkpoint = FileManager.default.temporaryDirectory.appendingPathComponent("replay-\(UUID().uuidString).json").path
        try ReplayCheckpoint(topic: harness.topic, fromMilliseconds: start, toMilliseconds: start + 20_000,
                             partitions: [PartitionWindow(partition: 0, start: 0, end: end, method: .lookup)]).save(to: checkpoint)

        // A dry run (which leaves the checkpoint as it is) reports the loss with exit 1.
        let command = try await IntegrationTests.CommandLineTests.RunningProcess(
            ["replay", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--from", RFC3339.format(milliseconds: start),
             "--to", RFC3339.format(milliseconds: start + 20_000), "--checkpoint", checkpoint, "--dry-run", "--progress", "log",
             "--key-file", harness.writeKeyFile()]).finish()
        #expect(command.status == 1, "\(command.stderr)")
        #expect(command.stderr.contains("Partition 0: offsets 0..<\(logStart) of the window (\(logStart) records) were deleted by retention"),
                "\(command.stderr)")

        let summary = try await Self.replay(harness, Self.configuration(harness, from: start, to: start + 20_000) {
            $0.checkpointPath = checkpoint
            $0.deadLetterTopic = nil
        })
        #expect(summary.deletedBeforeRead == [0: logStart])
        #expect(summary.recordsRead == Int(end - logStart), "the rest of the range was read from the log's start, not skipped")
        #expect(summary.outsideWindow == summary.recordsRead && summary.sent == 0 && summary.requestsSent == 0)
        #expect(summary.table.split(separator: "\n").contains { $0.contains("deleted before read (retention)") && $0.hasSuffix("  \(logStart) (partition 0: \(logStart))") },
                "\(summary.table)")
        #expect(try ReplayCheckpoint.load(from: checkpoint)?.complete == false)
    }

    /// A replayed vehicle that keeps failing is checked against Fleet Engine's live location again
    /// before each attempt: a newer fix delivered meanwhile (by the live relay) is not overwritten.
    @Test func aRetriedVehicleIsCheckedAgainstTheLiveLocationBeforeEachAttempt() async throws {
        let harness = try await RelayHarness(partitions: 1)
        defer { Task { await harness.shutdown() } }
        let start = WallClock.nowMilliseconds() - 3_600_000
        _ = try await Self.produceTimed(harness, vehicles: 1, steps: 3, start: start)
        let vehicle = VehicleIdentity(kind: .vehicle, id: "veh-0")
        harness.emulator.faultPlan.unavailableVehicles = ["veh-0"]
        async let replayed = Self.replay(harness, Self.configuration(harness, from: start, to: nil) { $0.retryDeadline = .seconds(30) })
        try await eventually("the replay retried") { (harness.emulator.statistics.updateResponsesByStatus[503] ?? 0) >= 2 }
        // The newer fix lands while updates still fail: an attempt whose read came before it
        // is refused, so only a read after it decides (letting updates through here would race
        // an attempt between its read and its update, which no check can close).
        harness.emulator.storeLocation(of: vehicle, recordedAtMilliseconds: start + 600_000)
        let summary = try await replayed
        #expect(summary.skippedNewerLive == 3 && summary.sent == 0)
        #expect(harness.emulator.vehicle(vehicle)?.locationTimeMilliseconds == start + 600_000)
        #expect(harness.emulator.vehicle(vehicle)?.backwardsUpdates == 0)
    }

    /// While Fleet Engine refuses to read live locations, the never-backwards check is off:
    /// each refusal is counted by result and the first is logged. (The live relay reads each
    /// vehicle's location once after taking its partitions, as after a restart.)
    @Test func refusedLiveLocationReadsAreCountedAndTheFirstIsLogged() async throws {
        let harness = try await RelayHarness(partitions: 2)
        defer { Task { await harness.shutdown() } }
        _ = try await Self.produceTimed(harness, vehicles: 12, steps: 1, start: WallClock.nowMilliseconds() - 600_000)
        harness.emulator.faultPlan.vehicleReadStatus = 403
        let metricsPort = try freeLoopbackPort()
        let relay = try IntegrationTests.CommandLineTests.RunningProcess(
            ["run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "live-checks",
             "--key-file", harness.writeKeyFile(), "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile,
             "--metrics-port", "\(metricsPort)", "--metrics-host", "127.0.0.1"])
        try await eventually("all twelve vehicles were sent") { (harness.emulator.statistics.updateResponsesByStatus[200] ?? 0) == 12 }
        let metrics = try await httpGet("http://127.0.0.1:\(metricsPort)/metrics").body
        #expect(metricValue(metrics, "fleet_relay_live_checks_total", ["result": "permission_denied"]) == 12, "\(metrics)")
        relay.process.terminate()
        let finished = await relay.finish()
        let notices = finished.stderr.split(separator: "\n").filter { $0.contains("refused to read the live location") }
        #expect(notices.count == 1, "\(finished.stderr)")
        #expect(notices.first?.contains("403") == true)
    }

    /// The number in a summary table row (`  accepted   12`).
    static func row(_ table: String, _ name: String) -> Int? {
        table.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix(name + "  ") }
            .flatMap { $0.split(separator: " ").last.flatMap { Int($0) } }
    }

    /// Through the binary: 30 fixes per vehicle with `--max-past-locations 5`, ten vehicles
    /// whose live location is newer than half their window, interrupted and resumed. Every fix
    /// reaches Fleet Engine once, in order, and no vehicle moves backwards.
    @Test func theCommandDryRunsThenResumesAnInterruptedReplayFromItsCheckpoint() async throws {
        let harness = try await RelayHarness(partitions: 4)
        defer { Task { await harness.shutdown() } }
        let start = WallClock.nowMilliseconds() - 3_600_000
        let events = try await Self.produceTimed(harness, vehicles: 100, steps: 30, start: start)
        // Vehicle i's fix of step s is stamped start + s s + i ms: veh-0…9 hold steps 0…14 already.
        let ahead = (0..<10).map { VehicleIdentity(kind: .vehicle, id: "veh-\($0)") }
        for vehicle in ahead { harness.emulator.storeLocation(of: vehicle, recordedAtMilliseconds: start + 14_500) }
        let expected = Dictionary(grouping: events, by: \.vehicle).mapValues { fixes in
            Set(fixes.map(\.recordedAt).filter { ahead.map(\.id).contains(fixes[0].vehicle) ? $0 > start + 14_500 : true })
        }
        let checkpoint = FileManager.default.temporaryDirectory.appendingPathComponent("replay-\(UUID().uuidString).json").path
        let base = ["replay", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--from", "-2h", "--to-end",
                    "--max-past-locations", "5", "--key-file", harness.writeKeyFile(), "--fleet-engine-url", harness.emulatorURL,
                    "--ca-file", harness.caFile, "--progress", "log"]

        let dryRun = try await IntegrationTests.CommandLineTests.RunningProcess(base + ["--dry-run"]).finish()
        #expect(dryRun.status == 0, "\(dryRun.stderr)")
        #expect(dryRun.stdout.contains("would send") && dryRun.stdout.contains("vehicles  100"), "\(dryRun.stdout)")
        #expect(dryRun.stdout.contains("requests  500 "), "\(dryRun.stdout)")
        #expect(dryRun.stdout.contains("events per vehicle  min 30, mean 30.0, max 30"))
        #expect(harness.emulator.statistics.requests == 0)

        let metricsPort = try freeLoopbackPort()
        let first = try IntegrationTests.CommandLineTests.RunningProcess(
            base + ["--rate", "40", "--checkpoint", checkpoint, "--metrics-port", "\(metricsPort)", "--metrics-host", "127.0.0.1"])
        try await eventually("the replay sent some requests") { (harness.emulator.statistics.updateResponsesByStatus[200] ?? 0) >= 100 }
        // Fleet Engine goes down, so the interrupt finds fixes unsent however fast this machine is.
        harness.emulator.goDown(for: .seconds(3600))
        let metrics = try await httpGet("http://127.0.0.1:\(metricsPort)/metrics").body
        #expect((metricValue(metrics, "fleet_relay_records_finished_total", ["mode": "replay", "outcome": "superseded"]) ?? 0) > 0)
        #expect(metricValue(metrics, "fleet_relay_replay_records_in_window", ["mode": "replay"]) == 3_000)
        first.process.interrupt()
        let interrupted = await first.finish()
        #expect(interrupted.status == 128 + SIGINT, "\(interrupted.stderr)")
        #expect(interrupted.stdout.contains("replay (interrupted)"))
        #expect(!interrupted.stderr.contains("fleet-relay: error"), "\(interrupted.stderr)")
        let saved = try #require(try ReplayCheckpoint.load(from: checkpoint))
        #expect(!saved.complete)
        let firstSent = try #require(Self.row(interrupted.stdout, "fixes sent"))
        harness.emulator.goDown(for: .zero)

        let second = try await IntegrationTests.CommandLineTests.RunningProcess(base + ["--rate", "0", "--checkpoint", checkpoint]).finish()
        #expect(second.status == 0, "\(second.stderr)")
        let secondSent = try #require(Self.row(second.stdout, "fixes sent"))
        #expect(firstSent + secondSent == 3_000 - 150, "every fix newer than the live location once: \(interrupted.stdout)\n\(second.stdout)")
        #expect(try ReplayCheckpoint.load(from: checkpoint)?.complete == true)
        for (vehicle, times) in expected {
            let stored = try #require(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: vehicle)))
            #expect(stored.receivedFixTimes == times, "\(vehicle)")
            #expect(stored.fixesOutOfOrder == 0 && stored.backwardsUpdates == 0, "\(vehicle)")
            #expect(stored.locationTimeMilliseconds == times.max())
        }
        #expect(harness.emulator.statistics.locationsReceived == 3_000 - 150, "nothing sent twice")
        let requestsBefore = harness.emulator.statistics.requests

        // The checkpoint belongs to "--from -2h --to-end": another window is a usage error, one line.
        var otherWindow = base
        otherWindow[otherWindow.firstIndex(of: "-2h")!] = "-3h"
        let mismatch = try await IntegrationTests.CommandLineTests.RunningProcess(otherWindow + ["--checkpoint", checkpoint]).finish()
        #expect(mismatch.status == 64, "\(mismatch.stderr)")
        let lines = mismatch.stderr.split(separator: "\n").filter { $0.hasPrefix("fleet-relay: error:") }
        #expect(lines.count == 1 && lines[0].contains("holds a replay of --from -2h --to-end, all partitions; this run asks for --from -3h"),
                "\(mismatch.stderr)")
        #expect(harness.emulator.statistics.requests == requestsBefore, "nothing was sent")
    }

    @Test func contradictoryWindowFlagsStopWithOneLine() async throws {
        let result = try await IntegrationTests.CommandLineTests.RunningProcess(
            ["replay", "--brokers", "127.0.0.1:1", "--topic", "t", "--from", "-1h", "--to", "-2h", "--key-file", "k"]).finish()
        #expect(result.status == 64, "a usage error")
        #expect(result.stderr.split(separator: "\n").count == 1)
        #expect(result.stderr.contains("--to must be later than --from"), "\(result.stderr)")
    }
}
}

/// The replay's progress, logged as lines: a line comes every interval while a phase runs (the
/// ticker is a timer sequence, not a task that sleeps), and the ticker ends with the phase.
@Suite struct ReplayProgressTests {
    @Test func aLineIsLoggedEveryIntervalWhileAPhaseRuns() async throws {
        let logs = CapturedLogs()
        let progress = ReplayProgress(style: .logLines, logInterval: .milliseconds(20), logger: logs.logger)
        try await progress.phase("read", total: 10, unit: "records") {
            try await eventually("three lines while the phase runs") {
                logs.lines.count { $0.contains("Replay read") } >= 3
            }
        }
        // `phase` returned: its task group waited for the ticker, so the ticker ended with it.
    }
}
