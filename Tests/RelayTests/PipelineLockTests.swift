import FleetAuth
import FleetEngine
import InputFormats
import Foundation
import Kafka
@testable import Relay
import Synchronization
import Testing

/// `Pipeline`, the lock around `PipelineState`, hands what must stay in order to Kafka
/// under that lock.
@Suite struct PipelineLockTests {
    /// One task takes records in (pausing the partition at its share) while workers on other
    /// threads finish them (resuming it once half finished). Handing a pause to Kafka is made
    /// slow, as when the thread that made it is preempted: handed over after the lock, that
    /// pause would land after the resume the workers made next, and the partition would stay
    /// paused with nothing unfinished left to resume it. Each round ends with every record
    /// finished, when the last wish Kafka got must be the state's: nothing paused.
    @Test func pauseWishesReachKafkaInTheOrderTheStateMadeThem() async throws {
        let partition = TopicPartition(topic: "t", partition: 0)
        let pipeline = Pipeline(limits: .init(maximumPendingRecords: 8))
        let handedOver = Mutex<(wishes: Int, last: Set<TopicPartition>)>((0, []))
        pipeline.applyPauses { wish in
            if !wish.isEmpty { Thread.sleep(forTimeInterval: 0.002) }
            handedOver.withLock { $0 = ($0.wishes + 1, wish) }
        }
        pipeline.handle { $0.assign([partition], generation: 1) }
        var roundsLeftPaused = 0
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    while let request = await pipeline.nextRequest(whenReady: { _ in }) {
                        pipeline.handle { $0.complete(request, Delivery(outcome: .accepted), now: .now) }
                    }
                }
            }
            var offset: Int64 = 0
            for _ in 0..<20 {
                for _ in 0..<40 {
                    pipeline.handle { $0.consume([Self.fix(offset: offset)], now: .now) }
                    offset += 1
                }
                try? await eventually("every record finished", timeout: .seconds(30)) {
                    pipeline.read(\.unfinishedRecords) == 0
                }
                if handedOver.withLock({ $0.last }) != pipeline.read(\.pauseWish) { roundsLeftPaused += 1 }
            }
            pipeline.handle { $0.closeIntake() }
        }
        #expect(handedOver.withLock { $0.wishes } >= 20, "the partition paused and resumed in each round")
        #expect(roundsLeftPaused == 0, "Kafka was left with a pause the state had lifted")
    }

    private static func fix(offset: Int64) -> ConsumedRecord {
        let record = KafkaRecord(topic: "t", partition: 0, offset: offset, key: nil, value: [], assignmentGeneration: 1)
        return .fix(PendingFix(update: LocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: "v\(offset % 16)"),
                                                      fix: LocationFix(latitude: 1, longitude: 2,
                                                                       recordedAtMilliseconds: 1_000 + offset)),
                               source: RecordSource(record)))
    }
}
