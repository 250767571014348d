import FleetEngine
import FleetModel
import InputFormats
import Kafka
@testable import Relay
import Testing

/// The adaptive concurrency limit and the request budget alone, then as the pipeline uses them.
@Suite struct ConcurrencyLimitTests {
    let start = ContinuousClock.now

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    @Test func anOverloadedRoundShrinksTheLimitOnceAndAnsweredRoundsGrowItBack() {
        var limit = ConcurrencyLimit(settings: .init(maximum: 40))
        #expect(limit.record(.answered(latency: .milliseconds(50)), startedAt: at(0), saturated: true, now: at(50)) == nil)
        #expect(limit.limit == 40, "never above --max-in-flight")
        var changes: [ConcurrencyLimit.Change] = []
        for attempt in 0..<79 {
            if let change = limit.record(.overloaded, startedAt: at(10), saturated: true, now: at(60 + attempt)) { changes.append(change) }
        }
        #expect(changes == [.overloadBegan(limit: 36, cause: .overloaded)])
        #expect(limit.limit == 36, "a round of attempts sent before the decrease says nothing about the new limit")
        for attempt in 0..<37 {
            _ = limit.record(.answered(latency: .milliseconds(50)), startedAt: at(140 + attempt), saturated: true, now: at(200 + attempt))
        }
        #expect(limit.limit == 37, "one step per round of answered attempts")
        for attempt in 0..<100 {
            _ = limit.record(.answered(latency: .milliseconds(50)), startedAt: at(300 + attempt), saturated: false, now: at(400 + attempt))
        }
        #expect(limit.limit == 37, "attempts that never reached the limit show nothing about a higher one")
    }

    /// 503s from a few vehicles Fleet Engine keeps refusing are no throttle; most attempts
    /// of a round ending so are.
    @Test func aFewRefusedVehiclesLeaveTheLimitAndMostAttemptsOverloadedShrinkIt() {
        var limit = ConcurrencyLimit(settings: .init(maximum: 20))
        for attempt in 0..<200 {
            let signal: ConcurrencyLimit.Signal = attempt % 10 == 0 ? .overloaded : .answered(latency: .milliseconds(50))
            #expect(limit.record(signal, startedAt: at(attempt), saturated: true, now: at(attempt + 50)) == nil)
        }
        #expect(limit.limit == 20 && !limit.isOverloaded)
        var changes: [ConcurrencyLimit.Change] = []
        for attempt in 200..<220 {
            let signal: ConcurrencyLimit.Signal = attempt % 10 < 6 ? .overloaded : .answered(latency: .milliseconds(50))
            if let change = limit.record(signal, startedAt: at(attempt), saturated: true, now: at(attempt + 50)) { changes.append(change) }
        }
        #expect(changes == [.overloadBegan(limit: 18, cause: .overloaded)])
    }

    @Test func latencyWellAboveItsBaselineShrinksTheLimit() {
        var limit = ConcurrencyLimit(settings: .init(maximum: 20))
        for attempt in 0..<300 {
            _ = limit.record(.answered(latency: .milliseconds(40 + attempt % 20)), startedAt: at(attempt), saturated: false, now: at(attempt + 50))
        }
        #expect(limit.limit == 20)
        var change: ConcurrencyLimit.Change?
        for attempt in 300..<340 where change == nil {
            change = limit.record(.answered(latency: .milliseconds(400)), startedAt: at(attempt), saturated: true, now: at(attempt + 400))
        }
        #expect(change == .overloadBegan(limit: 18, cause: .latency))
    }

    @Test func overloadEndsOnceAQuietPeriodPassedWithoutADecreaseCause() {
        var limit = ConcurrencyLimit(settings: .init(maximum: 10))
        for attempt in 0..<10 { _ = limit.record(.overloaded, startedAt: at(0), saturated: true, now: at(1 + attempt)) }
        #expect(limit.isOverloaded)
        #expect(limit.record(.answered(latency: .milliseconds(5)), startedAt: at(20), saturated: true, now: at(5_000)) == nil)
        #expect(limit.record(.answered(latency: .milliseconds(5)), startedAt: at(10_020), saturated: true, now: at(10_030))
            == .overloadEnded(lasted: .milliseconds(10_020), limit: 9))
        #expect(!limit.isOverloaded)
    }

    @Test func theBudgetHoldsItsRateAndSaysWhenTheNextTokenComes() {
        var budget = RequestBudget(rate: 100, now: start)
        var taken = 0
        for _ in 0..<5 where budget.take(now: start) { taken += 1 }
        #expect(taken == 5, "a twentieth of a second's worth at once")
        let sixth = budget.take(now: start)
        #expect(!sixth)
        #expect(budget.nextToken(now: start) == at(10))
        let early = budget.take(now: at(9))
        let due = budget.take(now: at(10))
        #expect(!early && due)
    }

    // MARK: In the pipeline

    @Test func thePipelineHandsOutNoMoreAttemptsThanTheLimit() throws {
        var limits = PipelineLimits()
        limits.concurrency = .init(maximum: 2)
        var state = PipelineState<Int>(limits: limits, now: start)
        _ = state.assign([TopicPartition(topic: "t", partition: 0)], generation: 1)
        _ = state.consume((0..<4).map { Self.fix("v\($0)", offset: Int64($0)) }, now: start)
        var handed: [CoalescedRequest] = []
        for worker in 0..<4 { handed += state.requestWork(worker, now: start).resume.compactMap(\.request) }
        #expect(handed.count == 2)
        let (actions, aftermath) = state.complete(handed[0], Self.throttledUpdate, now: at(50), random: { $0.lowerBound })
        #expect(aftermath.concurrencyLimit == nil && aftermath.overload == nil, "a 429 is a rate, not a limit in flight")
        #expect(actions.resume.map(\.request?.update.vehicle.id) == ["v0"], "the throttled vehicle keeps its place")
        let answered = state.complete(handed[1], Delivery(outcome: .accepted, newestKnownMilliseconds: 1, liveChecked: true), now: at(60))
        #expect(answered.0.resume.count == 1)
    }

    /// An update refused with 429 after its read: 2 requests sent, the read admitted.
    static var throttledUpdate: Delivery {
        var delivery = Delivery(outcome: .retry(TransientFailure(cause: .throttled, detail: "")), liveChecked: true)
        (delivery.requestsSent, delivery.requestsAnswered) = (2, 2)
        return delivery
    }

    /// A 429 begins pacing at the rate admitted; the throttled vehicle goes first again, without
    /// reading its live location twice, and the others wait for the rate's tokens as a deadline.
    @Test func a429PacesTheRestAndTheThrottledVehicleKeepsItsPlace() throws {
        var state = PipelineState<Int>(limits: PipelineLimits(), now: start)
        _ = state.assign([TopicPartition(topic: "t", partition: 0)], generation: 1)
        _ = state.consume((0..<40).map { Self.fix("v\($0)", offset: Int64($0)) }, now: start)
        let first = try #require(state.requestWork(0, now: start).resume.first?.request)
        #expect(first.requestsAtMost == 2, "a first request reads the live location")
        let (_, aftermath) = state.complete(first, Self.throttledUpdate, now: at(100), random: { $0.lowerBound })
        #expect(aftermath.pacing == .began(rate: 9), "one request admitted in 100 ms: 10/s, cut to 90 %")
        let again = try #require(state.requestWork(1, now: at(100)).resume.first?.request)
        #expect(again.update.vehicle.id == "v0" && again.requestsAtMost == 1, "first again, its read still holds")
        var handed = 1
        for worker in 2..<40 { handed += state.requestWork(worker, now: at(100)).resume.count }
        #expect(handed < 5, "the others wait for the rate: \(handed)")
        #expect(state.nextDeadline < at(1_000), "the next token is a deadline")
    }

    /// Vehicles answered 503 while most vehicles are fine leave the limit alone, even when they
    /// are all the traffic left; 503s for most vehicles shrink it.
    @Test func aFewVehiclesAnswered503LeaveThePipelinesLimitAloneAndMostVehiclesFailingShrinkIt() throws {
        var limits = PipelineLimits()
        limits.concurrency = .init(maximum: 8)
        var state = PipelineState<Int>(limits: limits, now: start)
        var now = start
        var handed: [CoalescedRequest] = []
        var changes: [ConcurrencyLimit.Change] = []
        func observe(_ actions: PipelineActions<Int>) {
            handed += actions.resume.compactMap(\.request)
        }
        func observe<Caused>(_ step: (PipelineActions<Int>, Caused)) {
            observe(step.0)
            if let change = (step.1 as? AttemptAftermath)?.overload { changes.append(change) }
        }
        for worker in 0..<8 { observe(state.requestWork(worker, now: now)) }
        _ = state.assign([TopicPartition(topic: "t", partition: 0)], generation: 1)
        observe(state.consume((0..<10).map { Self.fix("v\($0)", offset: Int64($0)) }, now: now))
        let unavailable = Delivery(outcome: .retry(TransientFailure(cause: .status(503), detail: "")))
        /// Answers every attempt handed out (the stuck ones 503), then lets 5 s pass (the idle
        /// vehicles are remembered); the workers ask again.
        func round(stuck: (String) -> Bool) {
            let attempts = handed
            handed = []
            for (worker, request) in attempts.enumerated() {
                let delivery = stuck(request.update.vehicle.id)
                    ? unavailable : Delivery(outcome: .accepted, newestKnownMilliseconds: 1, liveChecked: true)
                observe(state.complete(request, delivery, now: now, random: { $0.lowerBound }))
                observe(state.requestWork(100 + worker, now: now))
            }
            now = now + .seconds(5)
            observe(state.deadlineReached(now: now))
        }
        for _ in 0..<20 { round { ["v0", "v1"].contains($0) } }
        #expect(changes.isEmpty && state.concurrencyLimit == 8, "two of ten vehicles refused are no throttle, even alone: \(changes)")
        #expect(state.vehiclesFailing == 2)

        // Now Fleet Engine answers 503 for every vehicle: most fail, and the limit shrinks.
        observe(state.consume((2..<10).map { Self.fix("v\($0)", offset: 10 + Int64($0), at: 2) }, now: now))
        for _ in 0..<6 { round { _ in true } }
        #expect(changes.first == .overloadBegan(limit: 7, cause: .overloaded) && changes.count == 1, "\(changes)")
        #expect(state.concurrencyLimit! < 7, "a decrease per round while most vehicles fail")
    }

    @Test func aRequestBudgetMakesTheNextAttemptADeadline() throws {
        var limits = PipelineLimits()
        limits.maximumRequestsPerSecond = 10
        var state = PipelineState<Int>(limits: limits, now: start)
        _ = state.assign([TopicPartition(topic: "t", partition: 0)], generation: 1)
        _ = state.consume((0..<3).map { Self.fix("v\($0)", offset: Int64($0)) }, now: start)
        #expect(state.requestWork(0, now: start).resume.count == 1)
        #expect(state.requestWork(1, now: start).resume.isEmpty)
        #expect(state.nextDeadline == at(200), "the next token is a deadline, after the first attempt's read and update")
        #expect(state.deadlineReached(now: at(200)).0.resume.map(\.waiter) == [1])
    }

    static func fix(_ vehicle: String, offset: Int64, at milliseconds: Int64 = 1) -> ConsumedRecord {
        .fix(PendingFix(update: LocationUpdate(vehicle: VehicleIdentity(kind: .vehicle, id: vehicle),
                                               fix: LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: milliseconds)),
                        source: RecordSource(KafkaRecord(topic: "t", partition: 0, offset: offset, key: nil, value: [],
                                                         assignmentGeneration: 1))))
    }
}
