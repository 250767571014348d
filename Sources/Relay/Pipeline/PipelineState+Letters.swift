import Kafka

/// Dead letters: ordered into the letter queue, taken by letter writers as request workers take
/// requests, written or ordered again after a backoff, and given up at a shutdown out of time.
extension PipelineState {
    /// A letter writer asks for its next letter: it is resumed through the actions, now or
    /// later, with nil once no letter will come any more.
    public mutating func requestLetter(_ writer: Waiter, now: ContinuousClock.Instant) -> Actions {
        letterWriters.append(writer)
        return finished(Actions())
    }

    /// A dead letter was acknowledged: its record is finished.
    public mutating func deadLetterWritten(_ source: RecordSource, now: ContinuousClock.Instant) -> Actions {
        var actions = Actions()
        finish(source, now: now, &actions)
        endWork(on: ShortList(PartitionGeneration(source.topicPartition, source.generation)), &actions)
        letterEnded(now: now, &actions)
        return finished(actions)
    }

    /// A dead letter was not written: it is ordered again after a capped, jittered backoff, as a
    /// deadline of its own (no writer waits meanwhile), while its partition is still this
    /// member's and not being revoked. Otherwise it is dropped: the partition's next owner reads
    /// its record again. Its record stays unfinished, and so uncommitted, until written.
    public mutating func deadLetterFailed(_ order: DeadLetterOrder, now: ContinuousClock.Instant,
                                          random: (ClosedRange<Double>) -> Double = { Double.random(in: $0) }) -> Actions {
        var actions = Actions()
        let backoff = limits.retryPolicy.delay(attempt: order.failedWrites, retryAfterSeconds: nil, random: random)
        if owns(order.source), let due = letters.failed(order, backoff: backoff, now: now) {
            wakeTimer(for: due, &actions)
        } else {
            dropLetter(order, now: now, &actions)
        }
        return finished(actions)
    }

    /// Shutdown ran out of time: every letter still outstanding stays unwritten (its record
    /// uncommitted), none is ordered again, and the workers no longer wait for them.
    public mutating func giveUpDeadLetters(now: ContinuousClock.Instant) -> Actions {
        letters.giveUp()
        var actions = Actions()
        serveWaiters(now: now, &actions)
        return finished(actions)
    }

    /// A letter writer will take it; without a dead-letter topic it stays unfinished instead.
    /// `vehicleId` is the vehicle of the record's fix, nil for a record that became none.
    mutating func orderDeadLetter(_ source: RecordSource, of vehicleId: String?, reason: DeadLetterReason, detail: String,
                                  _ actions: inout Actions) {
        let letter = DeadLetterOrder(source: source, vehicleId: vehicleId, reason: reason, detail: detail)
        guard limits.writesDeadLetters else {
            actions.lettersNotWritten.append(letter)
            return
        }
        beginWork(on: source)
        letters.order(letter)
    }

    /// Letter writers take the ready letters; once no request and no letter will come any
    /// more, they are released.
    mutating func serveLetterWriters(_ actions: inout Actions) {
        while !letterWriters.isEmpty {
            if let letter = letters.takeReady() {
                actions.resumeLetters.append((letterWriters.removeFirst(), letter))
            } else if isDrained {
                actions.resumeLetters += letterWriters.map { ($0, nil) }
                letterWriters = []
            } else {
                return
            }
        }
    }

    /// Letters whose backoff ended are ready again; those of partitions no longer ours are dropped.
    mutating func orderDueLetters(now: ContinuousClock.Instant, _ actions: inout Actions) {
        for order in letters.takeDue(now: now) {
            if owns(order.source) {
                letters.orderAgain(order)
            } else {
                dropLetter(order, now: now, &actions)
            }
        }
    }

    private mutating func letterEnded(now: ContinuousClock.Instant, _ actions: inout Actions) {
        if letters.ended() { serveWaiters(now: now, &actions) }
    }

    /// A letter of a partition revoked or revoking: its work there ends, so that a revoke does
    /// not wait for a topic that refuses letters.
    private mutating func dropLetter(_ order: DeadLetterOrder, now: ContinuousClock.Instant, _ actions: inout Actions) {
        endWork(on: ShortList(PartitionGeneration(order.source.topicPartition, order.source.generation)), &actions)
        letterEnded(now: now, &actions)
    }
}
