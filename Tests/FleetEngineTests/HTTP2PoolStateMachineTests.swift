@testable import Egress
import Testing

/// The HTTP/2 pool's decisions without a socket: stand-in connections whose usability and
/// announced stream limit the test sets, as a server's SETTINGS and GOAWAY would.
struct HTTP2PoolStateMachineTests {
    final class StandIn: PooledConnection {
        var isUsable = true
        var streamLimit: Int?
        init(streamLimit: Int? = nil) { self.streamLimit = streamLimit }
    }

    final class Attempt {}

    typealias Machine = HTTP2PoolStateMachine<StandIn, Attempt>

    /// Leases a slot; a connect it asks for is started with a fresh attempt, returned with it.
    func lease(_ machine: inout Machine, on loop: Int?) -> (slot: Int, action: Machine.LeaseAction, attempt: Attempt?) {
        let lease = machine.lease(callerLoop: loop)
        guard case .connect = lease.action else { return (lease.slot, lease.action, nil) }
        let attempt = Attempt()
        machine.startedConnecting(attempt, inSlot: lease.slot)
        return (lease.slot, lease.action, attempt)
    }

    func connectLoop(_ action: Machine.LeaseAction) -> Int? {
        if case .connect(let loop) = action { loop } else { nil }
    }

    func sentOn(_ action: Machine.LeaseAction) -> StandIn? {
        if case .send(let connection) = action { connection } else { nil }
    }

    func awaited(_ action: Machine.LeaseAction) -> Attempt? {
        if case .awaitConnecting(let attempt) = action { attempt } else { nil }
    }

    @Test func theFirstRequestOnALoopConnectsThereAndTheNextOnesWaitForThatConnect() throws {
        var machine = Machine(loopCount: 2, streamsPerConnection: 100, maximumConnections: 8)
        let first = lease(&machine, on: 1)
        #expect(connectLoop(first.action) == 1)
        let second = lease(&machine, on: 1)
        #expect(second.slot == first.slot)
        #expect(awaited(second.action) === first.attempt)
        #expect(machine.slots.count == 2, "one slot per loop until a stream limit is reached")

        let connection = StandIn(streamLimit: 100)
        machine.finishedConnecting(try #require(first.attempt), inSlot: first.slot, with: connection)
        #expect(sentOn(lease(&machine, on: 1).action) === connection)
        // Another loop's requests get their own connection there.
        #expect(connectLoop(lease(&machine, on: 0).action) == 0)
    }

    @Test func aConnectionAtTheStreamLimitItsServerAnnouncedGetsASiblingOnTheCallersLoop() throws {
        var machine = Machine(loopCount: 2, streamsPerConnection: 100, maximumConnections: 8)
        let first = lease(&machine, on: 0)
        let connection = StandIn(streamLimit: 2)
        machine.finishedConnecting(try #require(first.attempt), inSlot: first.slot, with: connection)
        #expect(sentOn(lease(&machine, on: 0).action) === connection)

        let third = lease(&machine, on: 0)
        #expect(third.slot == 2, "a new slot after the one per loop")
        #expect(connectLoop(third.action) == 0)
        #expect(machine.slots[2].loop == 0)

        // The sibling, least busy, takes the next request while it connects.
        #expect(awaited(lease(&machine, on: 0).action) === third.attempt)
        // Both full: the server raising its limit lets the first connection take requests again.
        connection.streamLimit = 3
        #expect(sentOn(lease(&machine, on: 0).action) === connection)
        #expect(machine.slots.count == 3)
    }

    @Test func theConfiguredStreamsPerConnectionCapsWhatTheServerAllows() throws {
        var machine = Machine(loopCount: 1, streamsPerConnection: 1, maximumConnections: 4)
        let first = lease(&machine, on: 0)
        machine.finishedConnecting(try #require(first.attempt), inSlot: first.slot, with: StandIn(streamLimit: 100))
        #expect(lease(&machine, on: 0).slot == 1)
        #expect(lease(&machine, on: 0).slot == 2)
    }

    @Test func aSlotStillConnectingUsesTheLimitAnotherConnectionOfTheOriginAnnounced() throws {
        var machine = Machine(loopCount: 2, streamsPerConnection: 100, maximumConnections: 8)
        let first = lease(&machine, on: 0)
        machine.finishedConnecting(try #require(first.attempt), inSlot: first.slot, with: StandIn(streamLimit: 1))
        let onOtherLoop = lease(&machine, on: 1)
        #expect(connectLoop(onOtherLoop.action) == 1)
        // The slot on loop 1 has no SETTINGS yet; loop 0's server said 1 stream.
        #expect(lease(&machine, on: 1).slot == 2)
    }

    @Test func beyondTheConnectionLimitRequestsShareTheLeastBusyConnection() throws {
        var machine = Machine(loopCount: 1, streamsPerConnection: 1, maximumConnections: 2)
        let first = lease(&machine, on: 0)
        let a = StandIn(streamLimit: 1)
        machine.finishedConnecting(try #require(first.attempt), inSlot: first.slot, with: a)
        let second = lease(&machine, on: 0)
        let b = StandIn(streamLimit: 1)
        machine.finishedConnecting(try #require(second.attempt), inSlot: second.slot, with: b)

        #expect(sentOn(lease(&machine, on: 0).action) === a, "over the limit, on the least busy")
        #expect(machine.slots.count == 2)
        machine.released(slot: 1)
        #expect(sentOn(lease(&machine, on: 0).action) === b, "the slot a request left is now the least busy")
        #expect(machine.slots.map(\.requestsUnderWay) == [2, 1])
    }

    @Test func aFailedConnectEmptiesTheSlotSoTheNextRequestConnectsAgain() throws {
        var machine = Machine(loopCount: 1, streamsPerConnection: 100, maximumConnections: 4)
        let first = lease(&machine, on: 0)
        let attempt = try #require(first.attempt)
        machine.finishedConnecting(attempt, inSlot: first.slot, with: nil)
        machine.released(slot: first.slot)

        let retry = lease(&machine, on: 0)
        #expect(retry.slot == first.slot)
        #expect(connectLoop(retry.action) == 0)
        // The earlier attempt's late result does not overwrite the new attempt.
        machine.finishedConnecting(attempt, inSlot: first.slot, with: StandIn())
        #expect(awaited(lease(&machine, on: 0).action) === retry.attempt)
    }

    @Test func aConnectionThatStoppedTakingRequestsIsReplacedInItsSlot() throws {
        var machine = Machine(loopCount: 1, streamsPerConnection: 100, maximumConnections: 4)
        let first = lease(&machine, on: 0)
        let draining = StandIn(streamLimit: 100)
        machine.finishedConnecting(try #require(first.attempt), inSlot: first.slot, with: draining)
        draining.isUsable = false // GOAWAY, closed, silent or idle

        let next = lease(&machine, on: 0)
        #expect(next.slot == first.slot)
        #expect(connectLoop(next.action) == 0)
        #expect(machine.slots.count == 1, "an unusable connection's limit is not consulted")
    }

    @Test func aCallerOnNoEventLoopTakesTheLeastBusySlotAndGrowsTheLoopWithFewestSlots() throws {
        var machine = Machine(loopCount: 2, streamsPerConnection: 1, maximumConnections: 8)
        let onZero = lease(&machine, on: 0)
        machine.finishedConnecting(try #require(onZero.attempt), inSlot: onZero.slot, with: StandIn(streamLimit: 1))
        let anywhere = lease(&machine, on: nil)
        #expect(anywhere.slot == 1, "the idle slot on loop 1")
        #expect(connectLoop(anywhere.action) == 1)
        let grown = lease(&machine, on: nil)
        #expect(grown.slot == 2)
        #expect(machine.slots[2].loop == 0, "loops 0 and 1 had one slot each; the first of them")
        #expect(lease(&machine, on: nil).slot == 3)
        #expect(machine.slots[3].loop == 1)
    }

    @Test func theConnectionLimitIsAtLeastOnePerLoop() {
        let machine = Machine(loopCount: 4, streamsPerConnection: 0, maximumConnections: 1)
        #expect(machine.maximumConnections == 4)
        #expect(machine.streamsPerConnection == 1)
    }

    @Test func shuttingDownHandsBackEveryConnectionAndConnectAndEmptiesTheSlots() throws {
        var machine = Machine(loopCount: 2, streamsPerConnection: 100, maximumConnections: 4)
        let ready = lease(&machine, on: 0)
        let connection = StandIn()
        machine.finishedConnecting(try #require(ready.attempt), inSlot: ready.slot, with: connection)
        let connecting = lease(&machine, on: 1)

        let held = machine.shutDown()
        #expect(held.count == 2)
        if case .ready(let closed) = held[0] { #expect(closed === connection) } else { Issue.record("slot 0: \(held[0])") }
        if case .connecting(let pending) = held[1] { #expect(pending === connecting.attempt) } else { Issue.record("slot 1: \(held[1])") }
        #expect(connectLoop(lease(&machine, on: 0).action) == 0)
    }
}
