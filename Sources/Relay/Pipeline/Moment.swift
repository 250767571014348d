/// An instant in 8 bytes: nanoseconds since the first moment taken in the process (±292 years).
/// Also of fixed layout, unlike `ContinuousClock.Instant`, which the standard library keeps
/// resilient: a struct holding one is laid out at run time and copied through value witnesses.
struct Moment: Comparable {
    private static let origin = ContinuousClock.now
    private let nanoseconds: Int64

    init(_ instant: ContinuousClock.Instant) {
        nanoseconds = (instant - Self.origin).nanoseconds
    }

    var instant: ContinuousClock.Instant { Self.origin + .nanoseconds(nanoseconds) }

    static func < (earlier: Moment, later: Moment) -> Bool { earlier.nanoseconds < later.nanoseconds }

    static func - (later: Moment, earlier: Moment) -> Duration { .nanoseconds(later.nanoseconds - earlier.nanoseconds) }

    /// Whole nanoseconds since `earlier`, for counting in integers what a `Duration` would
    /// divide as 128-bit values through a `Double`.
    func nanoseconds(since earlier: Moment) -> Int64 { nanoseconds - earlier.nanoseconds }

    func advanced(byNanoseconds interval: Int64) -> Moment { Moment(nanoseconds: nanoseconds + interval) }

    private init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }
}

/// An optional instant kept as a `Moment`, for the pipeline's state structs: holding a
/// `ContinuousClock.Instant` (resilient) would lay the whole state out at run time, and reach
/// every field of it through its metadata.
@propertyWrapper
struct StoredAsMoment {
    private var moment: Moment?

    init(wrappedValue: ContinuousClock.Instant?) {
        moment = wrappedValue.map(Moment.init)
    }

    var wrappedValue: ContinuousClock.Instant? {
        get { moment?.instant }
        set { moment = newValue.map(Moment.init) }
    }

    /// The `Moment` itself (`$name`), for arithmetic that needs no instant.
    var projectedValue: Moment? {
        get { moment }
        set { moment = newValue }
    }
}
