/// The source of a location fix, as events name it and as Fleet Engine's `LocationSensor` does.
public enum LocationSensor: String, Sendable, CaseIterable {
    case gps = "GPS"
    case network = "NETWORK"
    case passive = "PASSIVE"
    case fused = "FUSED"
    case roadSnapped = "ROAD_SNAPPED"
    case customerSupplied = "CUSTOMER_SUPPLIED"
}

/// One validated position of one vehicle.
///
/// A fix waits in memory, with its record, until its request ended: up to the relay's bound
/// on pending records (50,000 by default). So the optional measures are stored without an
/// optional's extra byte, which pads each to 16 bytes: a measure's absence is a NaN (validated
/// measures are finite) and a heading's is `Int32.min`. 56 bytes instead of 88.
public struct LocationFix: Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    /// When the device recorded the fix, milliseconds since the epoch.
    public var recordedAtMilliseconds: Int64
    private var storedSpeed = Double.nan
    private var storedAccuracy = Double.nan
    private var storedAltitude = Double.nan
    private var storedHeading = Int32.min
    public var sensor: LocationSensor?

    public init(latitude: Double, longitude: Double, recordedAtMilliseconds: Int64, heading: Int? = nil,
                speedMetersPerSecond: Double? = nil, accuracyMeters: Double? = nil, altitudeMeters: Double? = nil,
                sensor: LocationSensor? = nil) {
        self.latitude = latitude
        self.longitude = longitude
        self.recordedAtMilliseconds = recordedAtMilliseconds
        self.sensor = sensor
        self.heading = heading
        self.speedMetersPerSecond = speedMetersPerSecond
        self.accuracyMeters = accuracyMeters
        self.altitudeMeters = altitudeMeters
    }

    /// Whole degrees clockwise from north, 0–359.
    public var heading: Int? {
        get { storedHeading == .min ? nil : Int(storedHeading) }
        set { storedHeading = newValue.map { Int32(clamping: $0) } ?? .min }
    }

    public var speedMetersPerSecond: Double? {
        get { Self.measure(storedSpeed) }
        set { storedSpeed = newValue ?? .nan }
    }

    public var accuracyMeters: Double? {
        get { Self.measure(storedAccuracy) }
        set { storedAccuracy = newValue ?? .nan }
    }

    public var altitudeMeters: Double? {
        get { Self.measure(storedAltitude) }
        set { storedAltitude = newValue ?? .nan }
    }

    private static func measure(_ stored: Double) -> Double? {
        stored.isNaN ? nil : stored
    }

    /// Compares what the fix says: two absent measures are equal, though their NaNs are not.
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.latitude == rhs.latitude && lhs.longitude == rhs.longitude
            && lhs.recordedAtMilliseconds == rhs.recordedAtMilliseconds && lhs.heading == rhs.heading
            && lhs.speedMetersPerSecond == rhs.speedMetersPerSecond && lhs.accuracyMeters == rhs.accuracyMeters
            && lhs.altitudeMeters == rhs.altitudeMeters && lhs.sensor == rhs.sensor
    }
}
