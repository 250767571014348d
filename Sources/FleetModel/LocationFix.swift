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
public struct LocationFix: Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double
    /// When the device recorded the fix, milliseconds since the epoch.
    public var recordedAtMilliseconds: Int64
    /// Whole degrees clockwise from north, 0–359.
    public var heading: Int?
    public var speedMetersPerSecond: Double?
    public var accuracyMeters: Double?
    public var altitudeMeters: Double?
    public var sensor: LocationSensor?

    public init(latitude: Double, longitude: Double, recordedAtMilliseconds: Int64, heading: Int? = nil,
                speedMetersPerSecond: Double? = nil, accuracyMeters: Double? = nil, altitudeMeters: Double? = nil,
                sensor: LocationSensor? = nil) {
        self.latitude = latitude
        self.longitude = longitude
        self.recordedAtMilliseconds = recordedAtMilliseconds
        self.heading = heading
        self.speedMetersPerSecond = speedMetersPerSecond
        self.accuracyMeters = accuracyMeters
        self.altitudeMeters = altitudeMeters
        self.sensor = sensor
    }
}
