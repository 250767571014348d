import FleetEngine
import FleetModel
import InputFormats
import Foundation
import Kafka
@testable import Relay
import Synchronization
import Testing

/// `Pipeline`, the lock around `PipelineState`, hands pause wishes to the record source
/// after the lock, numbered so that the source keeps the newest.
@Suite struct PipelineLockTests {
    /// One task takes records in (pausing the partition at its share) while workers on other
    /// threads finish them (resuming it once half finished). Handing a pause over is made
    /// slow, as when the thread that made it is preempted: that pause lands after the resume
    /// the workers made next. The source, keeping the wish with the highest sequence number as
    /// the consumer does, must end each round with the state's wish: nothing paused. Taking
    /// whichever wish arrived last instead leaves the partition paused with nothing unfinished
    /// left to resume it.
    @Test func pauseWishesReachKafkaInTheOrderTheStateMadeThem() async throws {
        let partition = TopicPartition(topic: "t", partition: 0)
        let pipeline = Pipeline(limits: .init(maximumPendingRecords: 8))
        let handedOver = Mutex<(wishes: Int, sequence: UInt64, last: Set<TopicPartition>, overtaken: Int)>((0, 0, [], 0))
        pipeline.applyPauses { wish, sequence in
            if !wish.isEmpty { Thread.sleep(forTimeInterval: 0.002) }
            handedOver.withLock {
                guard sequence > $0.sequence else {
                    $0.overtaken += 1
                    return
                }
                $0 = ($0.wishes + 1, sequence, wish, $0.overtaken)
            }
        }
        pipeline.changePauses { $0.assign([partition], generation: 1) }
        var roundsLeftPaused = 0
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    while let request = await pipeline.nextRequest(whenReady: { _ in }) {
                        _ = pipeline.handle { $0.complete(request, Delivery(outcome: .accepted), now: .now) }
                    }
                }
            }
            var offset: Int64 = 0
            for _ in 0..<20 {
                for _ in 0..<40 {
                    _ = pipeline.handle { $0.consume([Self.fix(offset: offset)], now: .now) }
                    offset += 1
                }
                try? await eventually("every record finished", timeout: .seconds(30)) {
                    pipeline.read(\.unfinishedRecords) == 0
                }
                // A wish is handed over after the lock: the thread that made the last one may not
                // have handed it over yet. Wait for its number (a wish that never arrives fails the round).
                let lastMade = pipeline.read { $0.ledger.lastWishSequence }
                try? await eventually("the last wish made was handed over", timeout: .seconds(30)) {
                    handedOver.withLock { $0.sequence } >= lastMade
                }
                if handedOver.withLock({ $0.last }) != pipeline.read(\.pauseWish) { roundsLeftPaused += 1 }
            }
            pipeline.handle { $0.closeIntake(now: .now) }
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

extension Pipeline {
    /// A request worker as a task: suspends until a request is ready for it; nil when no more will come.
    func nextRequest(whenReady apply: (Actions) -> Void) async -> CoalescedRequest? {
        let work = await withUnsafeContinuation { worker in
            apply(handle { $0.requestWork(.task(worker), now: .now) })
        }
        guard case .request(let request)? = work else { return nil }
        return request
    }
}
