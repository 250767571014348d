import Foundation
import FleetEngine
import Kafka
@testable import Relay
import Testing

/// The pipeline's dead letters on their own: what holds the workers, and when a failed
/// letter comes due again.
@Suite struct LetterQueueTests {
    let start = ContinuousClock.now

    func order(_ offset: Int64) -> DeadLetterOrder {
        DeadLetterOrder(source: RecordSource(KafkaRecord(topic: "t", partition: 0, offset: offset, key: nil, value: [],
                                                         assignmentGeneration: 1)),
                        reason: .badRecord(.notJSON), detail: "")
    }

    @Test func lettersHoldTheWorkersUntilTheLastOneEnded() {
        var letters = LetterQueue()
        #expect(letters.isSettled)
        letters.order(order(1))
        letters.order(order(2))
        #expect(!letters.isSettled)
        let first = letters.ended()
        #expect(!first, "one is still outstanding")
        let last = letters.ended()
        #expect(last, "the last one")
        #expect(letters.isSettled)
    }

    /// A failed letter comes due at the end of its backoff, with its failure counted, and failed
    /// letters come due in the order of their due times; a failed letter stays outstanding.
    @Test func failedLettersComeDueInTheOrderOfTheirBackoff() {
        var letters = LetterQueue()
        letters.order(order(1))
        letters.order(order(2))
        #expect(letters.takeReady()?.source.offset == 1)
        #expect(letters.takeReady()?.source.offset == 2)
        #expect(letters.failed(order(1), backoff: .seconds(2), now: start) == start + .seconds(2))
        #expect(letters.failed(order(2), backoff: .seconds(1), now: start) == start + .seconds(1))
        #expect(letters.nextDue == start + .seconds(1))
        #expect(letters.takeDue(now: start + .milliseconds(999)).isEmpty)
        let due = letters.takeDue(now: start + .seconds(2))
        #expect(due.map(\.source.offset) == [2, 1])
        #expect(due.allSatisfy { $0.failedWrites == 1 })
        #expect(letters.nextDue == nil)
        #expect(!letters.isSettled, "a letter ordered again is still outstanding")
        for letter in due { letters.orderAgain(letter) }
        #expect(letters.takeReady()?.source.offset == 2, "ready again in the order they came due")
    }

    /// Letters wait for a writer in the order they were ordered.
    @Test func writersTakeLettersInTheOrderTheyWereOrdered() {
        var letters = LetterQueue()
        for offset in Int64(0)..<5 { letters.order(order(offset)) }
        #expect(letters.readyCount == 5)
        var taken: [Int64] = []
        while let letter = letters.takeReady() { taken.append(letter.source.offset) }
        #expect(taken == [0, 1, 2, 3, 4])
        #expect(!letters.isSettled, "taken is not written")
    }

    /// Shutdown out of time: nothing failed comes due again, and nothing outstanding holds the workers.
    @Test func givingUpSettlesEveryLetter() {
        var letters = LetterQueue()
        letters.order(order(1))
        letters.order(order(2))
        letters.order(order(3))
        _ = letters.takeReady()
        _ = letters.failed(order(1), backoff: .seconds(1), now: start)
        letters.giveUp()
        #expect(letters.isSettled)
        #expect(letters.takeReady() == nil, "letters waiting for a writer are given up too")
        #expect(letters.takeDue(now: start + .seconds(5)).isEmpty)
        #expect(letters.failed(order(2), backoff: .seconds(1), now: start) == nil, "a letter failing after the give-up is dropped")
    }
}

/// The enums whose raw values are metric labels and letter headers: each label stays what the
/// README documents, and reads back as the same case.
@Suite struct LabelTests {
    @Test func failureCausesAreTheirRetryLabels() {
        let causes: [FailureCause] = [.signer, .status(503), .throttled, .transport(.timeout), .transport(.httpVersion),
                                      .refusedToken(.unauthenticated)]
        #expect(causes.map(\.rawValue) == ["signer", "http_503", "http_429", "timeout", "http_version", "unauthenticated"])
        #expect(causes.allSatisfy { FailureCause(rawValue: $0.rawValue) == $0 })
        #expect(FailureCause(rawValue: "http_") == nil && FailureCause(rawValue: "latency") == nil)
        #expect(FailureCause.transport(.tls).isConfiguration && !FailureCause.status(503).isConfiguration)
    }

    @Test func deadLetterReasonsAreTheirHeadersAndLabels() throws {
        let labels = DeadLetterReason.allCases.map(\.rawValue)
        #expect(Set(labels).count == labels.count, "one label per reason")
        #expect(labels.contains("not_json") && labels.contains("vehicle_not_found") && labels.contains("retry_deadline_exceeded"))
        let readme = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md"), encoding: .utf8)
        let undocumented = labels.filter { !readme.contains("`\($0)`") }
        #expect(undocumented.isEmpty, "dead-letter reasons the README does not name: \(undocumented)")
    }
}
