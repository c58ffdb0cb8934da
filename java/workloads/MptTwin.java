/** MptLoaders' class of one name defined by two class loaders. */
public class MptTwin implements java.util.function.IntUnaryOperator {
    public MptTwin() {
    }

    @Override
    public int applyAsInt(int value) {
        return value * 10;
    }
}
