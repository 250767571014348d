import Foundation

/// The rate of requests Fleet Engine admits from this relay under the project's quota, learnt
/// from its 429s. A limit on requests in flight is a rate only through the latency (one request
/// in flight answered in a millisecond is a thousand a second), so a quota is learnt as a rate:
///
/// - **Unlimited until throttled.** Nothing is paced while Fleet Engine admits everything.
/// - **A 429 sets the rate from what was admitted, then cuts it.** The rate becomes 90 % of the
///   requests admitted per second in the half second before the refused request was sent
///   (never more than it was): after a burst that emptied the quota's bucket this is the quota
///   itself, whatever was sent. Admitted requests count when they were sent, not when their
///   answers came: a relay that stood still (descheduled, its answers held up) would otherwise
///   see an empty half second before the 429 it handles next, and cut the rate to nothing.
///   Only a 429 to a request sent after the last cut cuts again; requests sent before it say
///   nothing about the new rate.
/// - **It grows back as CUBIC's window does (RFC 9438), on a rate:** concave up to the admitted
///   rate it was cut from, flat around it, then convex, probing ever faster. Near the last known
///   quota it overshoots slowly, so few requests are refused; far above it (a quota raised or
///   lifted) it climbs back to any rate within seconds. Growth is in requests per second, the
///   same for every relay, while a cut takes a share of each relay's own rate: relays sharing a
///   quota converge to fair shares, as TCP flows do, and none starves.
/// - **Pacing ends after a quiet spell:** once neither a 429 came nor a request waited for the
///   rate for `quietPeriod`.
///
/// A value: the pipeline's state machine owns it (inside `Pacing`) and feeds it every attempt's
/// end and every wait for a token.
public struct LearnedRate: Sendable {
    public struct Settings: Sendable, Equatable {
        /// What a cut keeps of the rate admitted over the last window.
        public var decrease = 0.9
        /// CUBIC's constant on a rate, in requests per second per second³: the rate is
        /// `ceiling + growth · (t − K)³`, t seconds after the cut, K when it is back at the
        /// ceiling (about 6 s after a cut from 800/s).
        public var growth = 0.4
        /// Over how long the admitted rate is measured at a 429.
        public var window = Duration.milliseconds(500)
        /// How long after it was sent an admitted request still counts: past this an answer is
        /// too late to say anything about the rate (and a refused request sent earlier is
        /// measured against the oldest window kept).
        public var history = Duration.seconds(10)
        /// The rate never falls below this many requests per second.
        public var minimum = 1.0
        /// Pacing ends once this long passed without a 429 and without a request waiting for it.
        public var quietPeriod = Duration.seconds(10)

        public init() {}
    }

    /// Pacing began or ended (logged once each way).
    public enum Change: Sendable, Equatable {
        case began(rate: Double)
        case ended(lasted: Duration)
    }

    /// A cut: the admitted rate it was cut from (CUBIC's W_max), the rate it set, and when.
    private struct Cut {
        let ceiling: Double
        let rate: Double
        let at: Moment
        /// Seconds after the cut at which the growth is back at the ceiling.
        let plateau: Double
    }

    public let settings: Settings
    private var admitted: AdmittedRateMeter
    private var cut: Cut?
    // Times as `Moment`s, so that the rate is of fixed layout: `Pacing` reads it before every
    // attempt, and a copy of a struct holding a `ContinuousClock.Instant` goes through value witnesses.
    private var pacingSince: Moment?
    private var lastThrottled: Moment?
    private var lastHeld: Moment?

    public init(settings: Settings = Settings(), now: ContinuousClock.Instant) {
        self.settings = settings
        self.admitted = AdmittedRateMeter(window: settings.window, history: settings.history, now: Moment(now))
    }

    /// Requests per second allowed now; nil while not pacing.
    public func rate(now: ContinuousClock.Instant) -> Double? {
        guard let cut else { return nil }
        let offset = (Moment(now) - cut.at).inSeconds - cut.plateau
        return max(settings.minimum, cut.ceiling + settings.growth * offset * offset * offset)
    }

    /// An attempt that started at `startedAt` ended: `admitted` of its requests were answered
    /// other than 429, and `throttled` says whether one was answered 429.
    public mutating func attemptEnded(admitted count: Int, throttled: Bool, startedAt: ContinuousClock.Instant,
                                      now: ContinuousClock.Instant) -> Change? {
        let (moment, sentAt) = (Moment(now), Moment(startedAt))
        admitted.add(count, sentAt: sentAt, now: moment)
        guard throttled else { return endIfQuiet(now: moment) }
        lastThrottled = moment
        if let cut, sentAt <= cut.at { return nil }
        let admittedRate = admitted.rate(before: sentAt, now: moment)
        let next = max(settings.minimum, min(rate(now: now) ?? .infinity, admittedRate * settings.decrease))
        let ceiling = max(admittedRate, next)
        cut = Cut(ceiling: ceiling, rate: next, at: moment, plateau: cbrt((ceiling - next) / settings.growth))
        guard pacingSince == nil else { return nil }
        pacingSince = moment
        return .began(rate: next)
    }

    /// A request waited for a token of the rate: the rate holds the relay back.
    public mutating func held(now: ContinuousClock.Instant) {
        lastHeld = Moment(now)
    }

    private mutating func endIfQuiet(now: Moment) -> Change? {
        guard let since = pacingSince, let lastThrottled, now - lastThrottled >= settings.quietPeriod,
              lastHeld.map({ now - $0 >= settings.quietPeriod }) ?? true else { return nil }
        (cut, pacingSince) = (nil, nil)
        return .ended(lasted: now - since)
    }
}

/// Requests admitted per second by when they were sent, over a window ending at a chosen
/// moment of the recent past, counted in twentieths of the window.
struct AdmittedRateMeter: Sendable {
    private static let slotsPerWindow = 20
    private let slotLength: Duration
    private let origin: Moment
    /// Counts of the last `history` (plus a window), by slot: slot `n` (counted from `origin`)
    /// lies at `n % counts.count`.
    private var counts: [Int]
    /// The newest slot (counted from `origin`) counts may fall in: the one `now` lies in.
    private var current = 0

    /// `slotLength` in nanoseconds: every answer finds its slot, in integers.
    private let slotNanoseconds: Int64

    init(window: Duration, history: Duration, now: Moment) {
        slotLength = window / Self.slotsPerWindow
        slotNanoseconds = max(1, slotLength.nanoseconds)
        origin = now
        counts = Array(repeating: 0, count: Self.slotsPerWindow + max(1, Int(history / slotLength)))
    }

    /// `count` requests sent at `sentAt` were admitted; dropped when sent before the history kept.
    mutating func add(_ count: Int, sentAt: Moment, now: Moment) {
        advance(to: slot(at: now))
        let sentSlot = min(slot(at: sentAt), current)
        guard sentSlot > current - counts.count else { return }
        counts[sentSlot % counts.count] += count
    }

    /// Admitted per second over the window up to `end`'s slot (the oldest window kept when
    /// `end` is older). When the meter was younger than a window at `end`, the window ends now
    /// instead (over less than a window while the meter is younger than one): a refused request
    /// sent at the start says nothing about a rate before it, and what came since is all there is.
    mutating func rate(before end: Moment, now: Moment) -> Double {
        advance(to: slot(at: now))
        let sentSlot = slot(at: end)
        let endSlot = sentSlot < Self.slotsPerWindow - 1 ? current : min(sentSlot, current)
        let last = max(endSlot, current - counts.count + Self.slotsPerWindow)
        let first = max(0, last - Self.slotsPerWindow + 1)
        // Only the part of the current slot that has passed can have sent anything.
        let lastElapsed = last == current ? (now - origin) - slotLength * current : slotLength
        let span = (slotLength * (last - first) + lastElapsed).inSeconds
        let sent = (first...last).reduce(0) { $0 + counts[$1 % counts.count] }
        return span > 0 ? Double(sent) / span : 0
    }

    private func slot(at moment: Moment) -> Int { max(0, Int(moment.nanoseconds(since: origin) / slotNanoseconds)) }

    private mutating func advance(to slot: Int) {
        guard slot > current else { return }
        for skipped in (current + 1)...min(slot, current + counts.count) { counts[skipped % counts.count] = 0 }
        current = slot
    }
}
