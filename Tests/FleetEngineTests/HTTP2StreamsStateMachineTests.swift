@testable import Egress
import NIOCore
import NIOHTTP2
import Testing

/// One HTTP/2 connection's decisions without a socket: streams are names, time is a clock the
/// test moves.
struct HTTP2StreamsStateMachineTests {
    typealias Machine = HTTP2StreamsStateMachine<String>

    let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)
    let liveness = HTTP2Liveness(pingAfterSilence: .seconds(5), pingTimeout: .seconds(2), idleTimeout: .seconds(60))

    func makeMachine() -> Machine {
        Machine(requestTimeout: .seconds(15), liveness: liveness, now: start)
    }

    func opened(_ action: Machine.StartAction) -> (HTTP2StreamID, NIODeadline?)? {
        if case .open(let id, let timer) = action { (id, timer) } else { nil }
    }

    func refusal(_ action: Machine.StartAction) -> ExchangeError? {
        if case .refuse(let error) = action { error } else { nil }
    }

    @Test func streamsGetOddIDsInOrderAndOneTimerServesAllDeadlines() throws {
        var machine = makeMachine()
        let first = try #require(opened(machine.start("a", now: start)))
        let second = try #require(opened(machine.start("b", now: start + .seconds(1))))
        #expect(first.0 == 1)
        #expect(second.0 == 3)
        #expect(first.1 == start + .seconds(15), "the first stream arms the timer for its deadline")
        #expect(second.1 == nil, "the armed timer already fires earlier")
        #expect(machine.streamsUnderWay == 2)
        #expect(machine[3] == "b")
    }

    @Test func theDeadlineTimerExpiresOnlyStreamsPastTheirDeadlineAndReArmsForTheNext() throws {
        var machine = makeMachine()
        _ = machine.start("a", now: start)
        _ = machine.start("b", now: start + .seconds(1))
        _ = machine.start("c", now: start + .seconds(2))
        _ = machine.end(3, now: start + .seconds(3)) // b answered

        let firing = machine.expireDeadlines(now: start + .seconds(15))
        #expect(firing.expired.map(\.1) == ["a"])
        #expect(firing.next == start + .seconds(17), "b's deadline is skipped: it was answered")
        let later = machine.expireDeadlines(now: start + .seconds(17))
        #expect(later.expired.map(\.0) == [5])
        #expect(later.next == nil)
        #expect(machine.streamsUnderWay == 0)
        // With no timer armed, the next stream arms one.
        #expect(try #require(opened(machine.start("d", now: start + .seconds(20)))).1 == start + .seconds(35))
    }

    @Test func anEndedStreamEndsOnce() {
        var machine = makeMachine()
        _ = machine.start("a", now: start)
        let answered = machine.end(1, now: start)
        #expect(answered?.stream == "a")
        let answeredAgain = machine.end(1, now: start)
        #expect(answeredAgain == nil, "an answer after a reset completes nothing twice")
    }

    @Test func aGoAwayStopsNewStreamsRefusesThoseAboveItsLastAndClosesWhenTheLastBelowEnds() throws {
        var machine = makeMachine()
        _ = machine.start("a", now: start)
        _ = machine.start("b", now: start)
        _ = machine.start("c", now: start)
        let (refused, closesNow) = machine.receivedGoAway(lastStreamID: 1)
        #expect(refused == ["b", "c"], "streams 3 and 5 were never processed")
        #expect(closesNow == false, "stream 1 is still to be answered")
        #expect(machine.isGoingAway)
        #expect(refusal(machine.start("d", now: start)) == .notSent)
        #expect(machine.end(3, now: start) == nil, "a refused stream has left")
        let lastEnded = machine.end(1, now: start)
        #expect(lastEnded?.closeConnection == true)
    }

    @Test func aGoAwayOnAnIdleConnectionClosesItNow() {
        var machine = makeMachine()
        let (refused, closesNow) = machine.receivedGoAway(lastStreamID: 0)
        #expect(refused.isEmpty)
        #expect(closesNow)
    }

    @Test func aFailedConnectionRefusesNewStreamsAndFailsItsStreamsWithTheFirstError() {
        var machine = makeMachine()
        _ = machine.start("a", now: start)
        _ = machine.start("b", now: start)
        machine.failed(ExchangeError.malformedResponse("first"))
        machine.failed(ExchangeError.connectionClosed)
        #expect(refusal(machine.start("c", now: start)) == .notSent)
        let (error, unanswered) = machine.closed()
        #expect(error as? ExchangeError == .malformedResponse("first"))
        #expect(Set(unanswered) == ["a", "b"])
        #expect(machine.streamsUnderWay == 0)
    }

    @Test func aConnectionThatClosedByItselfFailsItsStreamsAsClosed() {
        var machine = makeMachine()
        _ = machine.start("a", now: start)
        let (error, unanswered) = machine.closed()
        #expect(error as? ExchangeError == .connectionClosed)
        #expect(unanswered == ["a"])
    }

    @Test func aSilentServerIsPingedAndAnyFrameAnswersThePing() {
        var machine = makeMachine()
        _ = machine.start("a", now: start)
        #expect(machine.firstLivenessCheck == start + .seconds(5))
        let atFive = machine.checkLiveness(now: start + .seconds(5))
        #expect(atFive == .checkAgain(at: start + .seconds(10), ping: HTTP2PingData(withInteger: 1)))
        #expect(machine.isPingAwaited)
        let answersPing = machine.heardFrame(now: start + .seconds(6))
        #expect(answersPing, "the ping's timer is cancelled")
        #expect(!machine.isPingAwaited)
        let answersNoPing = machine.heardFrame(now: start + .seconds(7))
        #expect(answersNoPing == false)
        // Heard at 7 s: no PING before 12 s.
        let atTen = machine.checkLiveness(now: start + .seconds(10))
        #expect(atTen == .checkAgain(at: start + .seconds(12), ping: nil))
        let atTwelve = machine.checkLiveness(now: start + .seconds(12))
        #expect(atTwelve == .checkAgain(at: start + .seconds(17), ping: HTTP2PingData(withInteger: 2)))
    }

    @Test func anUnansweredPingClosesTheConnectionAsUnresponsive() {
        var machine = makeMachine()
        _ = machine.start("a", now: start)
        _ = machine.checkLiveness(now: start + .seconds(5))
        machine.pingTimedOut()
        #expect(machine.isGoingAway)
        let (error, unanswered) = machine.closed()
        #expect(error as? ExchangeError == .unresponsive(.seconds(2)))
        #expect(unanswered == ["a"])
    }

    @Test func aConnectionWithoutAStreamForTheIdleTimeoutCloses() {
        var machine = Machine(requestTimeout: .seconds(15),
                              liveness: HTTP2Liveness(pingAfterSilence: .seconds(50), pingTimeout: .seconds(5), idleTimeout: .seconds(20)),
                              now: start)
        _ = machine.start("a", now: start)
        _ = machine.end(1, now: start + .seconds(10))
        // Heard from at 12 s, idle since 10 s: the idle timeout comes first.
        _ = machine.heardFrame(now: start + .seconds(12))
        let atTwelve = machine.checkLiveness(now: start + .seconds(12))
        #expect(atTwelve == .checkAgain(at: start + .seconds(30), ping: nil))
        let atThirty = machine.checkLiveness(now: start + .seconds(30))
        #expect(atThirty == .close)
        #expect(machine.isGoingAway)
    }

    @Test func aStreamUnderWayKeepsTheConnectionFromIdling() {
        var machine = Machine(requestTimeout: .seconds(100),
                              liveness: HTTP2Liveness(pingAfterSilence: .seconds(50), pingTimeout: .seconds(5), idleTimeout: .seconds(20)),
                              now: start)
        _ = machine.start("a", now: start + .seconds(1))
        _ = machine.heardFrame(now: start + .seconds(30))
        let atThirty = machine.checkLiveness(now: start + .seconds(30))
        #expect(atThirty == .checkAgain(at: start + .seconds(80), ping: nil))
    }

    @Test func answersReadAreReturnedToTheConnectionWindowAQuarterAtATime() {
        var machine = makeMachine()
        let quarter = Machine.connectionWindow / 4
        let belowAQuarter = machine.consumed(bytes: quarter - 10)
        #expect(belowAQuarter == nil)
        let pastAQuarter = machine.consumed(bytes: 20)
        #expect(pastAQuarter == quarter + 10)
        let afterReturning = machine.consumed(bytes: 10)
        #expect(afterReturning == nil, "what was returned starts over")
    }

    @Test func streamIDsUsedUpStopNewStreamsAfterTheLastOne() throws {
        var machine = Machine(requestTimeout: .seconds(15), liveness: liveness, now: start, firstStreamNumber: Int32.max - 4)
        _ = machine.start("one before the last", now: start)
        #expect(!machine.isGoingAway)
        #expect(try #require(opened(machine.start("last", now: start))).0 == HTTP2StreamID(Int32.max - 2))
        #expect(machine.isGoingAway, "the next ID would be the largest; numbering stops short of overflowing")
        #expect(refusal(machine.start("beyond", now: start)) == .notSent)
    }
}
